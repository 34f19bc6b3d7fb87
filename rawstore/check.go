package rawstore

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nostr-archiver/archiver/event"
)

// CheckReport is what Check found.
type CheckReport struct {
	Records  int64 // records read back whole
	Events   int64 // primary copies
	Verdicts int64
	Damaged  int // records that could not be read or decoded
	// First lists the first damaged records (up to damageListed).
	First []*CorruptError
	// DamagedIDs are the event ids whose body or verdict is damaged, for
	// a repair to fetch again.
	DamagedIDs [][32]byte

	lostEvents [][2][]byte // event key ranges in damaged key blocks
}

func (r *CheckReport) lost(ek []byte) bool {
	for _, rg := range r.lostEvents {
		if bytes.Compare(ek, rg[0]) >= 0 && bytes.Compare(ek, rg[1]) < 0 {
			return true
		}
	}
	return false
}

// Err returns a *DamageError when something was damaged, else nil.
func (r *CheckReport) Err() error {
	if r.Damaged == 0 {
		return nil
	}
	return &DamageError{N: r.Damaged, First: r.First}
}

// Check reads back every record of the archive (each block's checksum is
// verified on the way) and decodes the event bodies, verdicts and queue
// entries; a valid verdict must have its event, whose bytes must parse to
// its id. Damage goes in the report; the error is for a failure to read on
// (an unreadable key block ends the walk, reported as damage after the
// last key read).
func (s *Store) Check() (*CheckReport, error) {
	if err := s.fold(); err != nil {
		return nil, err
	}
	r := &CheckReport{}
	seen := map[[32]byte]bool{} // damaged ids, listed once
	bad := func(ce *CorruptError) {
		r.Damaged++
		if len(r.First) < damageListed {
			r.First = append(r.First, ce)
		}
		if id, ok := ce.ID(); ok && !seen[id] {
			seen[id] = true
			r.DamagedIDs = append(r.DamagedIDs, id)
		}
	}
	// One walk per kind of record, so that a damaged key block (after
	// which the walk steps ahead, see iterPastDamage) costs each kind
	// only its own keys; the verdicts' walk still reads every event
	// judged valid, one by one.
	for _, p := range []byte{prefixCounter, prefixEvent, prefixAlternate, prefixMalformed, prefixRelay,
		prefixPending, prefixQuarant, prefixProven, prefixSighting, prefixShard, prefixVerdict, prefixInternal, prefixNote} {
		if err := s.checkPrefix(p, r, bad, seen); err != nil {
			return r, err
		}
	}
	return r, nil
}

func (s *Store) checkPrefix(p byte, r *CheckReport, bad func(*CorruptError), seen map[[32]byte]bool) error {
	upper := []byte{p + 1}
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{p}, UpperBound: upper})
	if err != nil {
		return err
	}
	defer func() { it.Close() }() // it is replaced past damage
	last := []byte{p}
	for ok := it.First(); ; {
		if !ok {
			err := it.Error()
			if err == nil {
				return nil
			}
			if !pebble.IsCorruptionError(err) {
				return fmt.Errorf("rawstore: check: %w", err)
			}
			next := s.iterPastDamage(last, upper)
			upTo := "the end of its kind"
			if next != nil {
				upTo = describeKey(next.Key())
			}
			bad(corrupt(append(last, 0), fmt.Errorf("records after this one unreadable, up to %s: %w", upTo, err)))
			if p == prefixEvent {
				hi := []byte{prefixEvent + 1}
				if next != nil {
					hi = append([]byte(nil), next.Key()...)
				}
				r.lostEvents = append(r.lostEvents, [2][]byte{append(last, 0), hi})
			}
			if next == nil {
				return nil
			}
			it.Close()
			it, ok = next, true
			continue
		}
		k := append(last[:0], it.Key()...)
		last = k
		v, err := value(it)
		if err == nil {
			err = s.checkRecord(k, v, r, seen)
		}
		var ce *CorruptError
		switch {
		case errors.As(err, &ce):
			bad(ce)
			ok = skipPast(it, k)
			continue
		case err != nil:
			return err
		}
		r.Records++
		switch k[0] {
		case prefixEvent:
			r.Events++
		case prefixVerdict:
			r.Verdicts++
		}
		ok = it.Next()
	}
}

// checkRecord decodes one record by its kind.
func (s *Store) checkRecord(k, v []byte, r *CheckReport, seen map[[32]byte]bool) error {
	switch k[0] {
	case prefixEvent:
		if len(k) != 1+idLen {
			return corrupt(k, errors.New("event key of the wrong length"))
		}
		// A body that does not parse may be a malformed event (judged
		// invalid, not damage): only a valid verdict's body must parse,
		// which the verdict's check below sees to.
		_, _, err := s.decodeEvent(k, v)
		return err
	case prefixAlternate:
		if len(v) != 0 {
			_, _, err := s.decodeEvent(k, v)
			return err
		}
	case prefixVerdict:
		valid, _, _, err := decodeVerdict(k, v)
		if err != nil || !valid {
			return err
		}
		var id [32]byte
		copy(id[:], k[1:])
		if seen[id] || r.lost(eventKey(&id)) {
			return nil // its event's damage is reported; reading it again fails again, slowly
		}
		ev, err := s.get(eventKey(&id))
		switch {
		case err != nil:
			return err
		case ev == nil:
			return corrupt(k, errors.New("valid verdict without its event"))
		}
		_, raw, err := s.decodeEvent(eventKey(&id), ev)
		if err != nil {
			return err
		}
		if e, err := event.Parse(raw); err != nil || e.ID != id {
			return corrupt(eventKey(&id), fmt.Errorf("judged valid but does not parse to its id (%v)", err))
		}
	case prefixSighting:
		if len(k) != sightingKeyLen || len(v) != 0 {
			return corrupt(k, fmt.Errorf("sighting of %d bytes, value of %d", len(k), len(v)))
		}
	case prefixPending:
		if len(k) != 9 || len(v) < idLen {
			return corrupt(k, fmt.Errorf("queue entry of %d bytes", len(v)))
		}
	case prefixQuarant:
		_, err := decodeQuarantined(k, v)
		return err
	}
	return nil
}
