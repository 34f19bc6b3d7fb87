package rawstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
)

// The E keys of new primary copies do not go into the memtable one by
// one. Their ids are random, so each insert searched the skiplist from
// far away, and every flush of them spanned the whole E range: in a 1M
// crawl they were about 2 of the store's 7 µs per event. Instead a batch
// carries one journal key (J|seq -> the batch's E keys and values, in id
// order), committed with the cursors like the rest, and the entries stay
// in memory (pendingE) until a fold writes them, sorted, to one table
// that Pebble ingests, and deletes the journal keys they came from.
//
// Crash story: the journal keys are in the batches that the E keys used
// to be in, so whatever was durable still is. A writable open folds the
// journal left by a crash before anything reads E; a read-only open
// keeps it in memory and reads E through an overlay (Store.r). A fold
// that crashed after the ingest leaves journal keys whose values the
// table holds already: folding them again writes the same values.
//
// The one ordering rule: an ingested table's keys are newer than every
// key in the memtable, so an E key written directly (a verdict promoting
// an alternate, a damaged copy replaced) must not be for an id still in
// the journal, or the next fold would put the old value back over it.
// Those writers fold first (foldIfPending).

// foldEvery is how many journal entries make a fold: ~7.5 MB of table, a
// few MB of memory, and at the crawl's speed one fold every second or so.
const foldEvery = 1 << 17

// journalEntryLen is one entry of a journal value: id, then E value.
const journalEntryLen = idLen + eventLenV3

type pendingEntries = map[[32]byte][eventLenV3]byte

// pendingE holds the E keys committed in journal keys but not yet folded.
type pendingE struct {
	// mu orders commits of journal keys with the map (a committed entry
	// is in m before anyone can look for it) and with folds. It is taken
	// after ingestMu and applyMu, never before them.
	mu sync.RWMutex
	// m is replaced, not cleared, by a fold: a reader that took it with
	// its snapshot (pending) keeps seeing what the snapshot cannot.
	m      pendingEntries
	seq    uint64 // the last journal key's seq
	foldAt int    // entries that make a fold (foldEvery; tests lower it)
	n      int    // folds done (tests)
}

func journalKey(seq uint64) []byte { return seqKey(prefixJournal, seq) }

// journalValue encodes fresh's E keys and values, in id order.
func journalValue(order []*newCopy, relay, seen uint32) []byte {
	v := make([]byte, len(order)*journalEntryLen)
	for i, f := range order {
		e := v[i*journalEntryLen:]
		copy(e, f.id[:])
		putSegValue(e[idLen:journalEntryLen], relay, seen, f.loc)
	}
	return v
}

// addJournal adds the entries of a journal value to m.
func addJournal(m pendingEntries, v []byte) {
	for e := v; len(e) >= journalEntryLen; e = e[journalEntryLen:] {
		m[[32]byte(e[:idLen])] = [eventLenV3]byte(e[idLen:journalEntryLen])
	}
}

// commitJournal commits b, which holds journal key seq (0: none) with the
// entries v, and puts the entries in the pending map once it is
// committed.
func (s *Store) commitJournal(b *pebble.Batch, v []byte, what string) error {
	s.pend.mu.Lock()
	defer s.pend.mu.Unlock()
	if v != nil {
		s.pend.seq++
		_ = b.Set(journalKey(s.pend.seq), v, nil)
	}
	if err := s.gate(what, b.Len(), func() error { return b.Commit(pebble.NoSync) }); err != nil {
		return err
	}
	if v != nil {
		addJournal(s.pend.m, v)
	}
	return nil
}

// eventIter returns an iterator over E and the pending map as of its
// creation: a fold after it puts entries in a table newer than the
// iterator, but leaves them in that map, which lookups then consult
// (pendingIn) before the iterator.
func (s *Store) eventIter(o *pebble.IterOptions) (*pebble.Iterator, pendingEntries, error) {
	s.pend.mu.RLock()
	defer s.pend.mu.RUnlock()
	it, err := s.r.NewIter(o)
	return it, s.pend.m, err
}

// pendingIn returns id's E value if m, a pending map from eventIter or
// the current one, holds it.
func (s *Store) pendingIn(m pendingEntries, id *[32]byte) ([]byte, bool) {
	s.pend.mu.RLock()
	defer s.pend.mu.RUnlock()
	v, ok := m[*id]
	if !ok {
		return nil, false
	}
	return v[:], true
}

// seekEvent returns the E value at ek through eit, or as get reads it
// when eit does not hold it (stored after eit was made, its key in the
// journal then): E keys are never deleted, so a miss of both is real.
// nil: no such event. The value is valid until eit moves.
func (s *Store) seekEvent(eit *pebble.Iterator, ek []byte) ([]byte, error) {
	if eit.SeekGE(ek) && bytes.Equal(eit.Key(), ek) {
		return eit.ValueAndErr()
	}
	if err := eit.Error(); err != nil {
		return nil, err
	}
	return s.get(ek)
}

// pendingValue returns id's E value if it is in the journal.
func (s *Store) pendingValue(id *[32]byte) ([]byte, bool) {
	s.pend.mu.RLock()
	m := s.pend.m
	s.pend.mu.RUnlock()
	return s.pendingIn(m, id)
}

// pendingCount is how many journal entries wait for a fold.
func (s *Store) pendingCount() int {
	s.pend.mu.RLock()
	defer s.pend.mu.RUnlock()
	return len(s.pend.m)
}

// fold writes every journal entry to E through an ingested table. A
// read-only store has nothing to fold: its journal is read through the
// overlay.
func (s *Store) fold() error {
	if s.opts.ReadOnly {
		return nil
	}
	s.pend.mu.Lock()
	defer s.pend.mu.Unlock()
	return s.foldLocked()
}

// foldIfPending folds first if id is in the journal: see the ordering
// rule above.
func (s *Store) foldIfPending(id *[32]byte) error {
	if _, ok := s.pendingValue(id); !ok {
		return nil
	}
	return s.fold()
}

func (s *Store) foldLocked() error {
	if len(s.pend.m) == 0 {
		return nil
	}
	entries := sortedEntries(s.pend.m)
	path := filepath.Join(s.opts.Dir, "fold.sst.tmp")
	size := len(entries) * (1 + journalEntryLen)
	what := fmt.Sprintf("fold %d event keys", len(entries))
	err := s.gate(what, size, func() error {
		if err := s.writeFoldTable(path, entries); err != nil {
			return err
		}
		// The journal keys went to the WAL unsynced (Ingest syncs
		// after the lock is released). A table is durable once
		// ingested: its E keys must not be before their batches, whose
		// cursors and segment tail say where their bodies are.
		if err := s.db.LogData(nil, pebble.Sync); err != nil {
			return err
		}
		return s.db.Ingest(context.Background(), []string{path})
	})
	// Ingest links the table into the store; the name it was written
	// under goes either way.
	if rerr := s.opts.FS.Remove(path); err == nil && rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = rerr
	}
	if err != nil {
		return err
	}
	// Unsynced: until this is durable, a crash folds the same entries
	// again.
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(journalKey(0), journalKey(s.pend.seq+1), nil)
	if err := s.gate("drop folded journal", b.Len(), func() error { return b.Commit(pebble.NoSync) }); err != nil {
		return err
	}
	s.pend.m = pendingEntries{} // grown as it fills: presized, the garbage of the old one came on top
	s.pend.n++
	return nil
}

// foldEntry is one E key and value of a fold, hi its id's first 8 bytes
// for sorting.
type foldEntry struct {
	hi uint64
	id [32]byte
	v  [eventLenV3]byte
}

// foldBucketBits is how many of an id's first bits place it in a fold's
// order before the sort: a fold's 128Ki ids are hashes, two to a bucket.
const foldBucketBits = 16

// sortedEntries returns m's entries in id order. Ranged into a slice and
// sorted there (looking each sorted id up in the map again cost more than
// writing the table), each placed straight into its bucket of the ids'
// first bits (the map ranged twice, to count them first) and then each
// bucket sorted: a sort of the whole slice, moving 64-byte entries
// through 17 rounds, was half of a fold. Forged ids may share a prefix; a
// crowded bucket is only a larger sort.
func sortedEntries(m pendingEntries) []foldEntry {
	starts := make([]int32, 1<<foldBucketBits+1)
	for id := range m {
		starts[int(binary.BigEndian.Uint16(id[:2]))+1]++
	}
	for i := 1; i < len(starts); i++ {
		starts[i] += starts[i-1]
	}
	entries := make([]foldEntry, len(m))
	next := slices.Clone(starts[:len(starts)-1])
	for id, v := range m {
		b := binary.BigEndian.Uint16(id[:2])
		entries[next[b]] = foldEntry{hi: binary.BigEndian.Uint64(id[:8]), id: id, v: v}
		next[b]++
	}
	for b := range len(starts) - 1 {
		if bucket := entries[starts[b]:starts[b+1]]; len(bucket) > 1 {
			slices.SortFunc(bucket, func(x, y foldEntry) int {
				if c := cmp.Compare(x.hi, y.hi); c != 0 {
					return c
				}
				return bytes.Compare(x.id[:], y.id[:])
			})
		}
	}
	return entries
}

// writeFoldTable writes the E keys of entries (sorted) to a table at
// path, synced, with the store's table format, bloom filter and block
// size.
func (s *Store) writeFoldTable(path string, entries []foldEntry) error {
	f, err := s.opts.FS.Create(path, "")
	if err != nil {
		return err
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{
		TableFormat:  s.db.TableFormat(),
		BlockSize:    s.opts.BlockSize,
		FilterPolicy: bloom.FilterPolicy(10),
		FilterType:   pebble.TableFilter,
		MergerName:   counterMerger.Name,
	})
	var k [1 + idLen]byte
	k[0] = prefixEvent
	for i := range entries {
		copy(k[1:], entries[i].id[:])
		if err := w.Set(k[:], entries[i].v[:]); err != nil {
			_ = w.Close()
			return err
		}
	}
	return w.Close() // syncs and closes f
}

// loadJournal reads the journal keys a crash left into the pending map.
// A damaged one is noted and left out: its events' bodies are in the log
// and their T and H keys list them, so a read-back finds them missing
// (errIndexedMissing) and the crawl fetches them again.
func (s *Store) loadJournal() error {
	s.pend.m = pendingEntries{}
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixJournal}, UpperBound: []byte{prefixJournal + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 9 {
			s.noteDamage(corrupt(k, errors.New("journal key of the wrong length")))
			continue
		}
		s.pend.seq = binary.BigEndian.Uint64(k[1:])
		v, err := it.ValueAndErr()
		if err == nil && len(v)%journalEntryLen != 0 {
			err = fmt.Errorf("journal value of %d bytes", len(v))
		}
		if err != nil {
			s.noteDamage(corrupt(k, err))
			continue
		}
		addJournal(s.pend.m, v)
	}
	return it.Error()
}

// openJournal loads the journal a crash left. A writable store folds it
// before anything reads E; a read-only one reads E through an overlay
// that holds it.
func (s *Store) openJournal() error {
	if err := s.loadJournal(); err != nil {
		return fmt.Errorf("read event key journal: %w", err)
	}
	if len(s.pend.m) == 0 {
		return nil
	}
	if !s.opts.ReadOnly {
		if err := s.fold(); err != nil {
			return fmt.Errorf("fold event key journal: %w", err)
		}
		return nil
	}
	o := s.db.NewIndexedBatch()
	var k [1 + idLen]byte
	k[0] = prefixEvent
	for id, v := range s.pend.m {
		copy(k[1:], id[:])
		_ = o.Set(k[:], v[:], nil)
	}
	s.overlay, s.r = o, o
	return nil
}
