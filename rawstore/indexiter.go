package rawstore

import (
	"bytes"
	"encoding/binary"

	"github.com/cockroachdb/pebble/v2"
)

// indexIter walks the T keys, or one relay's H keys, of a created_at range
// in key order: Pebble's and the journal's (the runs of new copies not
// folded yet), both as of its creation. A fold after it puts the runs'
// keys in tables the Pebble iterator does not see, so each key is seen
// once. Of a key in both (a damaged copy replaced while in the journal),
// the journal's value is the newer.
type indexIter struct {
	it   *pebble.Iterator
	pend []indexEntry // the journal's keys of the range, in key order
	i    int          // the next of pend
	key  []byte       // the current key, nil when done
	val  []byte
	// onIt: the current key is the Pebble iterator's; it moves on the
	// next step.
	onIt bool
}

type indexEntry struct{ k, v []byte }

// indexIter returns an iterator over the T keys (relay AnyRelay) or
// relay's H keys with since <= created_at <= until.
func (s *Store) indexIter(relay uint32, since, until uint64) (*indexIter, error) {
	var lo, hi []byte
	if relay == AnyRelay {
		lo = binary.BigEndian.AppendUint64([]byte{prefixIDs}, since)
		hi = []byte{prefixIDs + 1}
		if until < ^uint64(0) {
			hi = binary.BigEndian.AppendUint64([]byte{prefixIDs}, until+1)
		}
	} else {
		lo, hi = sightingBounds(relay, since, until)
	}
	s.pend.mu.RLock()
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	runs := s.pend.runs
	s.pend.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	return &indexIter{it: it, pend: pendingIndex(runs, relay, since, until)}, nil
}

// pendingIndex returns the T keys (relay AnyRelay) or relay's H keys of
// runs with since <= created_at <= until, in key order, of two equal keys
// the later run's only: the fold's order (timeOrder) of the runs that
// reach into the range, which for one relay is its H keys' order too.
func pendingIndex(runs []journalRun, relay uint32, since, until uint64) []indexEntry {
	var in []journalRun
	for _, r := range runs {
		if r.hi >= since && r.lo <= until && (relay == AnyRelay || r.relay == relay) {
			in = append(in, r)
		}
	}
	byTime := timeOrder(in)
	var out []indexEntry
	for i := range byTime {
		t := &byTime[i]
		if t.ts < since || t.ts > until || superseded(byTime, i) {
			continue
		}
		if relay == AnyRelay {
			out = append(out, indexEntry{idsKey(t.ts, t.id), binary.BigEndian.AppendUint32(nil, in[t.run].relay)})
		} else {
			out = append(out, indexEntry{k: sightingKey(relay, t.ts, t.id)})
		}
	}
	return out
}

// First moves to the first key; false if there is none.
func (x *indexIter) First() bool {
	x.i, x.onIt = 0, false
	x.it.First()
	return x.step()
}

// Next moves to the next key; false if there is none.
func (x *indexIter) Next() bool {
	if x.onIt {
		x.it.Next()
	}
	return x.step()
}

// step makes the smaller of the Pebble iterator's key and the next
// journal key the current one.
func (x *indexIter) step() bool {
	x.key, x.val, x.onIt = nil, nil, false
	itOK := x.it.Valid()
	if x.i < len(x.pend) {
		p := x.pend[x.i]
		c := -1
		if itOK {
			c = bytes.Compare(p.k, x.it.Key())
		}
		if c <= 0 {
			if c == 0 {
				x.it.Next() // the journal's value is the newer
			}
			x.key, x.val = p.k, p.v
			x.i++
			return true
		}
	}
	if !itOK {
		return false
	}
	x.key, x.val, x.onIt = x.it.Key(), x.it.Value(), true
	return true
}

// Valid says whether there is a current key.
func (x *indexIter) Valid() bool { return x.key != nil }

// Key is the current key, valid until the next step.
func (x *indexIter) Key() []byte { return x.key }

// Value is the current key's value, valid until the next step.
func (x *indexIter) Value() []byte { return x.val }

// Error is the Pebble iterator's error.
func (x *indexIter) Error() error { return x.it.Error() }

// Close closes the Pebble iterator.
func (x *indexIter) Close() error { return x.it.Close() }
