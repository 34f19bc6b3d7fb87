package rawstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nostr-archiver/archiver/frame"
)

// The sighting index lists, per relay, the stored ids it served (first,
// or as a later copy) by created_at, so that what a relay served in a
// window is one key range of its own: CountServed's cost follows the
// relay, not the archive (the audit after each relay's pass asks it for
// [0, now] of a small relay: before, a walk over every archived event of
// the range, 47% of the daemon's CPU sweeping 3,000 relays of a
// 2,000-event archive; docs/SCHEDULER.md). Ingest writes the key of each
// sighting with the E/T keys (first: in the journal, journal.go) or in
// the batch of the R key (later) it stands beside; the created_at is the
// primary copy's, the T key's, so that the index counts exactly what the
// T/R walk counts. Values are empty.
const prefixSighting = 'H' // H|relay (uint32 BE)|created_at (uint64 BE)|id

const sightingKeyLen = 1 + 4 + 8 + idLen

// sightingMarkKey marks the sighting index complete: set when a store
// without events is opened for writing (ingest indexes every sighting
// from the first), or when BuildSightingIndex finishes for an archive
// from before it, whose progress (the last T key suffix done) is kept in
// sightingBuildKey so that the build resumes. Without the mark,
// CountServed walks the T and R keys as before.
var (
	sightingMarkKey  = []byte{prefixInternal, 's', 'i', 'g', 'h', 't', 'i', 'n', 'g', 's'}
	sightingBuildKey = []byte{prefixInternal, 's', 'i', 'g', 'h', 't', 'i', 'n', 'g', 's', '-', 'b', 'u', 'i', 'l', 'd'}
)

// sightingBounds are the bounds of relay's H keys with since <=
// created_at <= until.
func sightingBounds(relay uint32, since, until uint64) (lo, hi []byte) {
	p := binary.BigEndian.AppendUint32([]byte{prefixSighting}, relay)
	lo = binary.BigEndian.AppendUint64(slices.Clip(p), since)
	hi = prefixEnd(p)
	if until < ^uint64(0) {
		hi = binary.BigEndian.AppendUint64(slices.Clip(p), until+1)
	}
	return lo, hi
}

func sightingKey(relay uint32, createdAt uint64, id *[32]byte) []byte {
	k := make([]byte, 0, sightingKeyLen)
	k = binary.BigEndian.AppendUint32(append(k, prefixSighting), relay)
	k = binary.BigEndian.AppendUint64(k, createdAt)
	return append(k, id[:]...)
}

// addSighting puts the H key of relay's sighting of the stored copy
// stored (the primary's bytes) in b; a copy without a readable
// created_at has no T key, and no H key either.
func addSighting(b *pebble.Batch, relay uint32, id *[32]byte, stored []byte) {
	if _, ts, err := frame.EventFields(stored); err == nil && ts >= 0 {
		_ = b.Set(sightingKey(relay, uint64(ts), id), nil, nil)
	}
}

// loadSightingMark reads the mark into s.sightIndexed, setting it first in
// a writable store without events.
func (s *Store) loadSightingMark() error {
	if _, closer, err := s.r.Get(sightingMarkKey); err == nil {
		closer.Close()
		s.sightIndexed.Store(true)
		return nil
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("rawstore: read sighting index mark: %w", err)
	}
	if s.opts.ReadOnly {
		return nil
	}
	last, err := s.lastKey([]byte{prefixEvent})
	if err != nil {
		return fmt.Errorf("rawstore: look for events: %w", err)
	}
	if last != nil {
		return nil
	}
	if err := s.db.Set(sightingMarkKey, nil, s.sync); err != nil {
		return fmt.Errorf("rawstore: mark sighting index: %w", err)
	}
	s.sightIndexed.Store(true)
	return nil
}

// SightingIndexReady reports whether the sighting index is complete, so
// that CountServed reads only the relay's own keys.
func (s *Store) SightingIndexReady() bool { return s.sightIndexed.Load() }

// BuildSightingIndex indexes the sightings of an archive from before the
// sighting index (building the id index first if needed) and marks it
// complete; it returns the events indexed in this run. It walks the T
// keys (created_at, id -> first relay) and, for each, the id's R keys: it
// reads keys only, but for an archive from before T values named the
// first relay. It resumes where an interrupted build stopped; progress,
// if not nil, is called after each batch. Ingest may run meanwhile: it
// indexes its own sightings.
func (s *Store) BuildSightingIndex(ctx context.Context, progress func(n int64)) (int64, error) {
	if s.sightIndexed.Load() {
		return 0, nil
	}
	if err := s.loadSightingMark(); err != nil || s.sightIndexed.Load() {
		return 0, err
	}
	if err := s.EnsureIDIndex(); err != nil {
		return 0, err
	}
	from, err := s.get(sightingBuildKey)
	if err != nil {
		return 0, fmt.Errorf("rawstore: read sighting index progress: %w", err)
	}
	lo := []byte{prefixIDs}
	if len(from) == 8+idLen {
		lo = prefixEnd(append([]byte{prefixIDs}, from...)) // past the last id done
	}
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: []byte{prefixIDs + 1}})
	if err != nil {
		return 0, fmt.Errorf("rawstore: build sighting index: %w", err)
	}
	defer it.Close()
	pit, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixProven}, UpperBound: []byte{prefixProven + 1}})
	if err != nil {
		return 0, fmt.Errorf("rawstore: build sighting index: %w", err)
	}
	defer pit.Close()
	var n int64
	b := s.db.NewBatch()
	defer func() { b.Close() }()
	var last []byte
	commit := func(mark bool) error {
		if last != nil {
			_ = b.Set(sightingBuildKey, last, nil)
		}
		if mark {
			_ = b.Set(sightingMarkKey, nil, nil)
			_ = b.Delete(sightingBuildKey, nil)
		}
		err := s.gate("build sighting index", b.Len(), func() error { return b.Commit(pebble.Sync) })
		b.Close()
		b = s.db.NewBatch()
		if err == nil && progress != nil {
			progress(n)
		}
		return err
	}
	pk := make([]byte, 1+idLen)
	pk[0] = prefixProven
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 1+8+idLen {
			continue
		}
		ts, id := binary.BigEndian.Uint64(k[1:9]), [32]byte(k[9:])
		last = append(last[:0], k[1:]...)
		if v := it.Value(); len(v) == 4 {
			_ = b.Set(sightingKey(binary.BigEndian.Uint32(v), ts, &id), nil, nil)
		} else {
			// A T key from before T values named the first relay.
			v, err := s.get(eventKey(&id))
			if err == nil && v != nil {
				var relay uint32
				if relay, _, err = s.decodeEvent(eventKey(&id), v); err == nil {
					_ = b.Set(sightingKey(relay, ts, &id), nil, nil)
				}
			}
			if err != nil && !s.noteDamage(err) {
				return n, fmt.Errorf("rawstore: build sighting index: %w", err)
			}
		}
		copy(pk[1:], id[:])
		for ok := pit.SeekGE(pk); ok && bytes.HasPrefix(pit.Key(), pk); ok = pit.Next() {
			if rk := pit.Key(); len(rk) == 1+idLen+4 {
				_ = b.Set(sightingKey(binary.BigEndian.Uint32(rk[1+idLen:]), ts, &id), nil, nil)
			}
		}
		if err := pit.Error(); err != nil {
			return n, fmt.Errorf("rawstore: build sighting index: read provenance: %w", err)
		}
		n++
		if b.Len() > indexBuildBatch {
			if err := commit(false); err != nil {
				return n, err
			}
			if err := ctx.Err(); err != nil {
				return n, err
			}
		}
	}
	if err := it.Error(); err != nil {
		return n, fmt.Errorf("rawstore: build sighting index: %w", err)
	}
	if err := commit(true); err != nil {
		return n, err
	}
	s.sightIndexed.Store(true)
	return n, nil
}

// countSightings is CountServed over the sighting index: the relay's H
// keys in the range, each event's body read only for match.
func (s *Store) countSightings(relay uint32, since, until uint64, match func(raw []byte) bool) (int64, error) {
	it, err := s.indexIter(relay, since, until)
	if err != nil {
		return 0, err
	}
	defer it.Close()
	var eit *pebble.Iterator
	if match != nil {
		if eit, err = s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEvent}, UpperBound: []byte{prefixEvent + 1}}); err != nil {
			return 0, err
		}
		defer eit.Close()
	}
	var n int64
	ek := make([]byte, 1+idLen)
	ek[0] = prefixEvent
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != sightingKeyLen {
			continue
		}
		if match == nil {
			n++
			continue
		}
		copy(ek[1:], k[1+4+8:])
		v, err := s.seekEvent(eit, ek)
		if err != nil {
			return n, fmt.Errorf("rawstore: read event %x: %w", ek[1:9], err)
		}
		if len(v) < eventHeaderLen {
			continue
		}
		_, raw, err := s.decodeEvent(ek, v)
		if err != nil {
			return n, fmt.Errorf("rawstore: read event %x: %w", ek[1:9], err)
		}
		if match(raw) {
			n++
		}
	}
	if err := it.Error(); err != nil {
		return n, fmt.Errorf("rawstore: count sightings: %w", err)
	}
	return n, nil
}

// keepDamagedSource keeps, when relay's copy c replaces a damaged
// primary, the relay that served the id first: its E header is lost with
// the damage, but the T key (the same event, so the same created_at)
// still names it. It becomes an R key (when it first served the id is
// lost too: unknown), so that Sources, CountServed with or without the
// sighting index, and a build of that index all keep its sighting;
// before, it vanished from provenance with the header.
func (s *Store) keepDamagedSource(b *pebble.Batch, relay uint32, c *Copy) error {
	ts, ok := copyTime(c)
	if !ok {
		return nil
	}
	// Still in the journal, its T key is too: the E value there, intact,
	// names the first relay.
	v, ok := s.pendingValue(&c.ID)
	var err error
	if ok {
		v = v[1:5]
	} else {
		v, err = s.get(idsKey(ts, &c.ID))
	}
	if err != nil {
		if s.noteDamage(err) {
			return nil
		}
		return fmt.Errorf("rawstore: read id index of %x: %w", c.ID[:8], err)
	}
	if len(v) == 4 && binary.BigEndian.Uint32(v) != relay {
		_ = b.Merge(provKey(&c.ID, binary.BigEndian.Uint32(v)), nil, nil)
	}
	return nil
}
