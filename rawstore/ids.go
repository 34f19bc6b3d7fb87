package rawstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nostr-archiver/archiver/frame"
)

// The id index lists the stored ids by (created_at, id), the order
// NIP-77 reconciles in, so a time window's ids are one key-range scan
// instead of a walk over every event body. Ingest writes it for each new
// primary copy; stores from before it get it built once (EnsureIDIndex).
// A T value names the relay that first served the id (uint32 BE), so
// that counting what a relay served in a window reads keys, not event
// bodies (CountServed); archives from before it have empty values.
const prefixIDs = 'T' // T|created_at (uint64 BE)|id -> first relay

// idIndexKey marks the id index complete: present once every E key
// has its T key (ingest keeps it so from then on).
var idIndexKey = []byte{prefixInternal, 'i', 'd', 'i', 'n', 'd', 'e', 'x'}

func idsKey(createdAt uint64, id *[32]byte) []byte {
	k := make([]byte, 0, 1+8+idLen)
	k = binary.BigEndian.AppendUint64(append(k, prefixIDs), createdAt)
	return append(k, id[:]...)
}

// indexID adds the T key of id, created at ts and first served by relay,
// to b.
func indexID(b *pebble.Batch, id *[32]byte, ts uint64, relay uint32) {
	_ = b.Set(idsKey(ts, id), binary.BigEndian.AppendUint32(nil, relay), nil)
}

// copyTime returns c's created_at, scanning Raw if it was not given;
// false if it is unreadable or negative: such a copy has no T key (it
// cannot be in any NIP-77 window anyway).
func copyTime(c *Copy) (uint64, bool) {
	ts := c.CreatedAt
	if !c.Timed {
		var err error
		if _, ts, err = frame.EventFields(c.Raw); err != nil {
			return 0, false
		}
	}
	return uint64(ts), ts >= 0
}

// markIDIndexIfEmpty marks the id index complete in a store without
// events: ingest indexes every event from the first, so it never needs a
// build (which reads every event body).
func (s *Store) markIDIndexIfEmpty() error {
	last, err := s.lastKey([]byte{prefixEvent})
	if err != nil {
		return fmt.Errorf("rawstore: look for events: %w", err)
	}
	if last != nil {
		return nil
	}
	if err := s.db.Set(idIndexKey, nil, s.sync); err != nil {
		return fmt.Errorf("rawstore: mark id index: %w", err)
	}
	s.idIndexed.Store(true)
	return nil
}

// EnsureIDIndex builds the id index from the stored events unless it is
// already complete. Ingest may run meanwhile: it indexes its own copies.
func (s *Store) EnsureIDIndex() error {
	if err := s.fold(); err != nil {
		return err
	}
	s.idIndexMu.Lock()
	defer s.idIndexMu.Unlock()
	if s.idIndexed.Load() {
		return nil
	}
	if _, closer, err := s.r.Get(idIndexKey); err == nil {
		closer.Close()
		s.idIndexed.Store(true)
		return nil
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("rawstore: read id index mark: %w", err)
	}
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEvent}, UpperBound: []byte{prefixEvent + 1}})
	if err != nil {
		return fmt.Errorf("rawstore: build id index: %w", err)
	}
	defer it.Close()
	b := s.db.NewBatch()
	defer func() { b.Close() }()
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("rawstore: build id index: %w", err)
		}
		if len(it.Key()) != 1+idLen || eventHeaderSize(v) == 0 {
			continue
		}
		relay, raw, err := s.decodeEvent(it.Key(), v)
		if err != nil {
			if s.noteDamage(err) {
				continue // a body that cannot be read back has no time to index
			}
			return fmt.Errorf("rawstore: build id index: %w", err)
		}
		c := Copy{ID: [32]byte(it.Key()[1:]), Raw: raw}
		if ts, ok := copyTime(&c); ok {
			indexID(b, &c.ID, ts, relay)
		}
		if b.Len() > 4<<20 {
			if err := s.gate("build id index", b.Len(), func() error { return b.Commit(pebble.NoSync) }); err != nil {
				return err
			}
			b.Close()
			b = s.db.NewBatch()
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("rawstore: build id index: %w", err)
	}
	_ = b.Set(idIndexKey, nil, nil)
	if err := s.gate("build id index", b.Len(), func() error { return b.Commit(pebble.Sync) }); err != nil {
		return err
	}
	s.idIndexed.Store(true)
	return nil
}

// IDsInRange calls fn with the (created_at, id) of every stored event with
// since <= created_at <= until, in that order, building the index first
// if needed.
func (s *Store) IDsInRange(since, until uint64, fn func(createdAt uint64, id [32]byte) error) error {
	return s.idEntries(since, until, func(createdAt uint64, id [32]byte, _ []byte) error { return fn(createdAt, id) })
}

// idEntries is IDsInRange with each T value (see prefixIDs).
func (s *Store) idEntries(since, until uint64, fn func(createdAt uint64, id [32]byte, v []byte) error) error {
	if err := s.EnsureIDIndex(); err != nil {
		return err
	}
	it, err := s.indexIter(AnyRelay, since, until)
	if err != nil {
		return fmt.Errorf("rawstore: list ids: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 1+8+idLen {
			continue
		}
		if err := fn(binary.BigEndian.Uint64(k[1:9]), [32]byte(k[9:]), it.Value()); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("rawstore: list ids: %w", err)
	}
	return nil
}

// Has reports whether id is stored.
func (s *Store) Has(id [32]byte) (bool, error) {
	v, err := s.get(eventKey(&id))
	if err != nil {
		return false, err
	}
	return v != nil, nil
}

// CountServed counts the stored events with since <= created_at <= until
// that relay served (first, or as a later copy) and that match accepts
// (nil: all). It is what a crawl holds of a relay's range, whatever the
// pages that fetched it looked like. Without match it reads only keys:
// the T value names the first relay, an R key a later one (reading each
// body instead was most of a 1M-event crawl's CPU: 52 of 93 CPU-s).
//
// With the sighting index complete (sightings.go) it reads the relay's
// own H keys in the range, and nothing else without match. An archive
// from before that index, until `archiver reprocess --index` builds it,
// is walked whole over the range: each T key, and the R keys of the
// events another relay served first, looked up in sorted runs on one
// iterator (SeekPrefixGE: the bloom filters skip the tables without the
// key), not by a Get each: a Get per event of the range was 58% of the
// daemon's CPU sweeping 1,000 relays of 20 events (docs/SCHEDULER.md).
func (s *Store) CountServed(relay uint32, since, until uint64, match func(raw []byte) bool) (int64, error) {
	if s.sightIndexed.Load() {
		return s.countSightings(relay, since, until, match)
	}
	return s.countServedScan(relay, since, until, match)
}

// countServedScan is CountServed without the sighting index.
func (s *Store) countServedScan(relay uint32, since, until uint64, match func(raw []byte) bool) (int64, error) {
	eit, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEvent}, UpperBound: []byte{prefixEvent + 1}})
	if err != nil {
		return 0, err
	}
	defer eit.Close()
	pit, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixProven}, UpperBound: []byte{prefixProven + 1}})
	if err != nil {
		return 0, err
	}
	defer pit.Close()
	var n int64
	var later [][32]byte // served first by another relay: is there an R key?
	pk := make([]byte, 1+idLen+4)
	pk[0] = prefixProven
	binary.BigEndian.PutUint32(pk[1+idLen:], relay)
	lookup := func() error {
		slices.SortFunc(later, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
		for i := range later {
			copy(pk[1:], later[i][:])
			if pit.SeekPrefixGE(pk) && bytes.Equal(pit.Key(), pk) {
				n++
			}
		}
		later = later[:0]
		if err := pit.Error(); err != nil {
			return fmt.Errorf("rawstore: read provenance: %w", err)
		}
		return nil
	}
	ek := make([]byte, 1+idLen)
	ek[0] = prefixEvent
	err = s.idEntries(since, until, func(_ uint64, id [32]byte, tv []byte) error {
		if match == nil && len(tv) == 4 {
			if binary.BigEndian.Uint32(tv) == relay {
				n++
				return nil
			}
			if len(later) == servedRun {
				if err := lookup(); err != nil {
					return err
				}
			}
			later = append(later, id)
			return nil
		}
		copy(ek[1:], id[:])
		v, err := s.seekEvent(eit, ek)
		if err != nil {
			return fmt.Errorf("rawstore: read event %x: %w", id[:8], err)
		}
		if len(v) < eventHeaderLen {
			return nil
		}
		if binary.BigEndian.Uint32(v[1:5]) != relay {
			copy(pk[1:], id[:])
			if !pit.SeekPrefixGE(pk) || !bytes.Equal(pit.Key(), pk) {
				return pit.Error()
			}
		}
		if match == nil {
			n++
			return nil
		}
		_, raw, err := s.decodeEvent(ek, v)
		if err != nil {
			return fmt.Errorf("rawstore: read event %x: %w", id[:8], err)
		}
		if match(raw) {
			n++
		}
		return nil
	})
	if err == nil {
		err = lookup()
	}
	return n, err
}

// servedRun is how many ids CountServed sorts before looking them up.
const servedRun = 4096
