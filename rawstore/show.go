package rawstore

import (
	"bytes"

	"github.com/cockroachdb/pebble/v2"
)

// Held is everything the archive holds of one id (`archiver show`).
type Held struct {
	// Primary is the copy export reads (nil if the id is not held) and
	// PrimaryRelay the source that first served it.
	Primary      []byte
	PrimaryRelay uint32
	// Verdict on the primary: "valid", "invalid" or "pending", and why an
	// invalid one failed.
	Verdict string
	Reason  string
	// Sources are every source that served the id, the first one first,
	// and Seen when each first served it (unix seconds; 0: unknown, for
	// copies archived before the times were kept).
	Sources []uint32
	Seen    []int64
	// Alternates are copies whose bytes differ from the primary, waiting
	// for their own verdict.
	Alternates []HeldCopy
	// Quarantined are the copies with this id that failed for good.
	Quarantined []HeldCopy
}

// HeldCopy is one copy of an id other than the primary.
type HeldCopy struct {
	Relay  uint32
	Reason string // why it failed; "" for an alternate not yet judged
	Seen   int64  // when an alternate was first received (0: unknown)
	Raw    []byte
}

// Lookup returns what the archive holds of id. It reads every quarantined
// copy to find those of id: a command for a person, not a hot path.
func (s *Store) Lookup(id [32]byte) (Held, error) {
	var h Held
	v, err := s.get(eventKey(&id))
	if err != nil {
		return h, err
	}
	if eventHeaderSize(v) > 0 {
		if h.PrimaryRelay, h.Primary, err = s.decodeEvent(eventKey(&id), v); err != nil {
			return h, err
		}
		h.Verdict = "pending"
	}
	vd, err := s.get(verdictKey(&id))
	if err != nil {
		return h, err
	}
	if len(vd) >= 5 {
		h.Verdict, h.Reason = "valid", ""
		if vd[0] == statusInvalid {
			h.Verdict, h.Reason = "invalid", string(vd[5:])
		}
	}
	if h.Primary != nil {
		if h.Sources, h.Seen, err = s.sightings(id); err != nil {
			return h, err
		}
	}
	p := append([]byte{prefixAlternate}, id[:]...)
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return h, err
	}
	for it.First(); it.Valid(); it.Next() {
		if v := it.Value(); eventHeaderSize(v) > 0 { // empty once resolved
			relay, raw, err := s.decodeEvent(it.Key(), v)
			if err != nil {
				_ = it.Close()
				return h, err
			}
			h.Alternates = append(h.Alternates, HeldCopy{Relay: relay, Raw: bytes.Clone(raw), Seen: eventSeen(v)})
		}
	}
	if err := it.Close(); err != nil {
		return h, err
	}
	err = s.ForEachQuarantined(func(q Quarantined) error {
		if q.ID != nil && *q.ID == id {
			h.Quarantined = append(h.Quarantined, HeldCopy{Relay: q.Relay, Reason: q.Reason, Raw: bytes.Clone(q.Raw)})
		}
		return nil
	})
	return h, err
}
