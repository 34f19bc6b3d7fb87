package rawstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// AnyRelay, as ReadBack's relay, reads back every stored event of the
// range, whichever relay served it.
const AnyRelay = ^uint32(0)

// readBackBatch is how many ids ReadBack reads at once: sorted by id, so
// many that neighbouring seeks share blocks, then their bodies in runs
// along the log. Per 1M ids: batches of 4Ki took 6.2 s, of 16Ki and 64Ki
// 3.4-3.6 s (peak RSS of the crawl 150 and 180 MB).
const readBackBatch = 1 << 14

// errIndexedMissing is the damage of an event an index lists and whose
// record is gone.
var errIndexedMissing = errors.New("missing, though the index lists it")

// ReadBack reads back the stored body of every event with since <=
// created_at <= until that relay served (AnyRelay: every stored event of
// the range) and calls fn with each, in created_at order a batch at a
// time; ok says whether the body read back whole (its record's checksum
// holds). One that does not, or whose record is gone while an index still
// lists it, is noted as damage (see Damage) until a fetched copy replaces
// it. The index keys (T, H) outlive a damaged body: a crawl that counts
// a range as held, or a reconciliation that tells a relay the archive has
// an id, reads the bodies back first.
//
// Without the sighting index (an archive from before it) a relay's range
// is read as every stored event of the range: more than the relay served,
// never less. A damaged block of the index itself ends the walk with a
// *CorruptError (errors.Is ErrCorrupt), noted as damage too. One ReadBack
// runs at a time; the others wait (or end with ctx).
func (s *Store) ReadBack(ctx context.Context, relay uint32, since, until uint64, fn func(createdAt uint64, id [32]byte, ok bool) error) error {
	select {
	case s.readBack <- struct{}{}:
		defer func() { <-s.readBack }()
	case <-ctx.Done():
		return ctx.Err()
	}
	type entry struct {
		ts uint64
		id [32]byte
	}
	batch := make([]entry, 0, readBackBatch)
	keys := make([][]byte, 0, readBackBatch)
	state := make(map[[32]byte]bool, readBackBatch) // id -> read back whole
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		keys = keys[:0]
		clear(state)
		for i := range batch {
			keys = append(keys, eventKey(&batch[i].id))
		}
		err := s.readStored(keys, func(k, _, _ []byte, err error) { state[[32]byte(k[1:])] = err == nil })
		if err != nil {
			return fmt.Errorf("rawstore: read back events: %w", err)
		}
		for _, e := range batch {
			ok, found := state[e.id]
			if !found {
				s.noteDamage(corrupt(eventKey(&e.id), errIndexedMissing))
			}
			if err := fn(e.ts, e.id, ok); err != nil {
				return err
			}
		}
		batch = batch[:0]
		return nil
	}
	add := func(ts uint64, id [32]byte) error {
		batch = append(batch, entry{ts, id})
		if len(batch) == cap(batch) {
			return flush()
		}
		return nil
	}
	var err error
	if relay == AnyRelay || !s.sightIndexed.Load() {
		if err = s.IDsInRange(since, until, add); pebble.IsCorruptionError(err) {
			ce := corrupt([]byte{prefixIDs}, err)
			s.noteDamage(ce)
			err = ce
		}
	} else {
		err = s.walkSightings(relay, since, until, add)
	}
	if err == nil {
		err = flush()
	}
	return err
}

// walkSightings calls fn with the (created_at, id) of each of relay's H
// keys with since <= created_at <= until, in that order.
func (s *Store) walkSightings(relay uint32, since, until uint64, fn func(createdAt uint64, id [32]byte) error) error {
	it, err := s.indexIter(relay, since, until)
	if err != nil {
		return err
	}
	defer it.Close()
	var last []byte // the last key read, for the damage past it
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != sightingKeyLen {
			continue
		}
		last = append(last[:0], k...)
		if err := fn(binary.BigEndian.Uint64(k[1+4:1+4+8]), [32]byte(k[1+4+8:])); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		at, _ := sightingBounds(relay, since, until)
		if last != nil {
			at = last
		}
		if ce, ok := corruptIf(append(slices.Clip(at), 0), err).(*CorruptError); ok {
			s.noteDamage(ce)
			return ce
		}
		return fmt.Errorf("rawstore: list sightings of relay %s: %w", s.RelayURL(relay), err)
	}
	return nil
}
