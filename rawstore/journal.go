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
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
)

// The E, T and H keys of new primary copies do not go into the memtable
// one by one. Their ids are random, so each E insert searched the
// skiplist from far away, and every flush of them spanned the whole E
// range: in a 1M crawl they were about 2 of the store's 7 µs per event;
// the T and H keys (every event's created_at, and the first relay's
// sighting of it) cost another 2.3 µs in inserts, flushes and WAL bytes.
// Instead a batch carries one journal key (J|seq|1 -> the batch's ids,
// E values and created_at), committed with the cursors like the rest,
// and the entries stay in memory (pendingE) until a fold writes them,
// sorted, to one table of E keys, one of T keys and one of H keys that
// Pebble ingests together, and deletes the journal keys they came from.
// Journal keys from before the T and H keys joined them (J|seq, E
// entries only) still fold into E: their T and H keys are in Pebble.
//
// Crash story: the journal keys are in the batches that the E, T and H
// keys used to be in, so whatever was durable still is. A writable open
// folds the journal left by a crash before anything reads; a read-only
// open keeps it in memory and reads E through an overlay (Store.r), and
// T and H as a writable store does, merged (indexIter). A fold that
// crashed after the ingest leaves journal keys whose values the tables
// hold already: folding them again writes the same values.
//
// The one ordering rule: an ingested table's keys are newer than every
// key in the memtable, so an E key written directly (a verdict promoting
// an alternate, a damaged copy replaced) must not be for an id still in
// the journal, or the next fold would put the old value back over it.
// Those writers fold first (foldIfPending). T and H keys written directly
// (an index build, a later relay's sighting) are never those of an entry
// in the journal: a build walks only folded E and T keys, and a later
// relay's H key names another relay.

// foldEvery is how many journal entries make a fold: ~7 MB of E table and
// ~6 MB each of T and H, ~17 MB of memory (map and runs), and at the
// crawl's speed one fold a second or so. Half as many per fold took 20
// MB off a verified 1M crawl's peak RSS but cost ~0.5 CPU-s (9 pairs).
const foldEvery = 1 << 17

// journalEntryLen is one entry of a journal value: id, E value, then
// created_at (noTime: none, so no T or H key). journalEntryLenE is one of
// a journal key from before (format 0): id, then E value.
const (
	journalEntryLen  = idLen + eventLenV3 + 8
	journalEntryLenE = idLen + eventLenV3
	// journalTimed is the format byte that ends the key of a journal
	// value with created_at; keys without it hold E entries only.
	journalTimed = 1
	noTime       = ^uint64(0)
)

type pendingEntries = *journalIndex

// journalRun is one committed journal value of the current format: its
// entries' T and H keys (relay's sightings) wait in it for the fold.
type journalRun struct {
	relay  uint32
	lo, hi uint64 // the created_at of its first and last timed entries
	v      []byte // entries in (created_at, id) order, untimed last
}

// pendingE holds the E keys committed in journal keys but not yet folded.
type pendingE struct {
	// mu orders commits of journal keys with the map (a committed entry
	// is in m before anyone can look for it) and with folds. It is taken
	// after ingestMu and applyMu, never before them.
	mu sync.RWMutex
	// m is replaced, not cleared, by a fold: a reader that took it with
	// its snapshot (pending) keeps seeing what the snapshot cannot.
	m pendingEntries
	// runs, likewise replaced by a fold, holds the T and H keys of m's
	// entries: a reader of those keys merges the runs of its iterator's
	// moment (indexIter).
	runs   []journalRun
	seq    uint64 // the last journal key's seq
	foldAt int    // entries that make a fold (foldEvery; tests lower it)
	n      int    // folds done (tests)
}

// journalKey is the key of journal value seq, of a batch of relay's: a
// loader that cannot read the value still knows whose cursors it
// passed (see loadJournal).
func journalKey(seq uint64, relay uint32) []byte {
	return binary.BigEndian.AppendUint32(append(seqKey(prefixJournal, seq), journalTimed), relay)
}

// journalValue encodes fresh's entries (sorted by created_at, then id).
func journalValue(order []*newCopy, relay, seen uint32) []byte {
	v := make([]byte, len(order)*journalEntryLen)
	for i, f := range order {
		e := v[i*journalEntryLen:]
		copy(e, f.id[:])
		putSegValue(e[idLen:], relay, seen, f.loc)
		ts := noTime
		if f.tsOK {
			ts = f.ts
		}
		binary.BigEndian.PutUint64(e[idLen+eventLenV3:journalEntryLen], ts)
	}
	return v
}

// addJournal adds the entries of a journal value to m, and to runs unless
// they come from a journal key of format 0 (n is the entry's length).
func addJournal(m pendingEntries, runs []journalRun, v []byte, n int) []journalRun {
	for e := v; len(e) >= n; e = e[n:] {
		m.put((*[32]byte)(e[:idLen]), (*[eventLenV3]byte)(e[idLen:idLen+eventLenV3]))
	}
	if n != journalEntryLen || len(v) < n || entryTime(v) == noTime {
		return runs // no T or H key
	}
	r := journalRun{relay: binary.BigEndian.Uint32(v[idLen+1:]), lo: entryTime(v), v: v}
	for i := len(v)/n - 1; i >= 0; i-- {
		if ts := entryTime(v[i*n:]); ts != noTime {
			r.hi = ts
			break
		}
	}
	return append(runs, r)
}

// entryTime is the created_at of the journal entry e starts with.
func entryTime(e []byte) uint64 {
	return binary.BigEndian.Uint64(e[idLen+eventLenV3 : journalEntryLen])
}

// commitJournal commits b, with a journal key holding the entries v of a
// batch of relay's unless v is nil, and puts the entries in the pending
// map and runs once it is committed.
func (s *Store) commitJournal(b *pebble.Batch, v []byte, relay uint32, what string) error {
	s.pend.mu.Lock()
	defer s.pend.mu.Unlock()
	if v != nil {
		s.pend.seq++
		_ = b.Set(journalKey(s.pend.seq, relay), v, nil)
	}
	if err := s.gate(what, b.Len(), func() error { return b.Commit(pebble.NoSync) }); err != nil {
		return err
	}
	if v != nil {
		s.pend.runs = addJournal(s.pend.m, s.pend.runs, v, journalEntryLen)
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
	v, ok := m.get(id)
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
	return s.pendingIn(s.pendingSnapshot(), id)
}

// pendingSnapshot returns the journal's entries as they stand: a fold
// after leaves them there (see pendingE.m).
func (s *Store) pendingSnapshot() pendingEntries {
	s.pend.mu.RLock()
	defer s.pend.mu.RUnlock()
	return s.pend.m
}

// pendingCount is how many journal entries wait for a fold.
func (s *Store) pendingCount() int {
	s.pend.mu.RLock()
	defer s.pend.mu.RUnlock()
	return s.pend.m.len()
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
	if s.pend.m.len() == 0 {
		return nil
	}
	runs := s.pend.runs
	timedMax := 0 // timed entries, at most
	for _, r := range runs {
		timedMax += len(r.v) / journalEntryLen
	}
	var paths []string
	write := func(name string, keys func(set setFunc) error) error {
		path := filepath.Join(s.opts.Dir, name)
		paths = append(paths, path)
		return s.writeFoldTable(path, keys)
	}
	size := s.pend.m.len()*(1+journalEntryLenE) + timedMax*(1+8+idLen+4+sightingKeyLen)
	what := fmt.Sprintf("fold %d event keys", s.pend.m.len())
	err := s.gate(what, size, func() error {
		// One table after the other, each order made just before its
		// table: the E entries and the T order together were ~12 MB
		// more at the fold's peak.
		if err := write("fold-e.sst.tmp", func(set setFunc) error { return setEventKeys(set, sortedEntries(s.pend.m)) }); err != nil {
			return err
		}
		if timedMax > 0 {
			byTime := timeOrder(runs)
			if err := write("fold-t.sst.tmp", func(set setFunc) error { return setTimeKeys(set, byTime, runs) }); err != nil {
				return err
			}
			if err := write("fold-h.sst.tmp", func(set setFunc) error { return setSightingKeys(set, byTime, runs) }); err != nil {
				return err
			}
		}
		// The journal keys went to the WAL unsynced (Ingest syncs
		// after the lock is released). A table is durable once
		// ingested: its keys must not be before their batches, whose
		// cursors and segment tail say where their bodies are.
		if err := s.db.LogData(nil, pebble.Sync); err != nil {
			return err
		}
		// One ingest: the three tables become visible together.
		return s.db.Ingest(context.Background(), paths)
	})
	// Ingest links the tables into the store; the names they were
	// written under go either way.
	for _, path := range paths {
		if rerr := s.opts.FS.Remove(path); err == nil && rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = rerr
		}
	}
	if err != nil {
		return err
	}
	// Unsynced: until this is durable, a crash folds the same entries
	// again.
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(seqKey(prefixJournal, 0), seqKey(prefixJournal, s.pend.seq+1), nil)
	if err := s.gate("drop folded journal", b.Len(), func() error { return b.Commit(pebble.NoSync) }); err != nil {
		return err
	}
	s.pend.m = newJournalIndex(s.pend.foldAt)
	s.pend.runs = nil
	s.pend.n++
	return nil
}

// setFunc adds a key to a table being written, in key order.
type setFunc func(k, v []byte) error

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

// sortedEntries returns m's entries in id order, in a new slice (a reader
// may hold m). Each is placed straight into its bucket of the ids' first
// bits (counted first) and then each bucket sorted: a sort of the whole
// slice, moving 64-byte entries through 17 rounds, was half of a fold.
// Forged ids may share a prefix; a crowded bucket is only a larger sort.
func sortedEntries(m pendingEntries) []foldEntry {
	starts := make([]int32, 1<<foldBucketBits+1)
	m.each(func(e *foldEntry) { starts[int(binary.BigEndian.Uint16(e.id[:2]))+1]++ })
	for i := 1; i < len(starts); i++ {
		starts[i] += starts[i-1]
	}
	entries := make([]foldEntry, m.len())
	next := slices.Clone(starts[:len(starts)-1])
	m.each(func(e *foldEntry) {
		b := binary.BigEndian.Uint16(e.id[:2])
		entries[next[b]] = *e
		next[b]++
	})
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

// timed is a journal entry with a created_at: a T and an H key. run is
// its run's place in the journal: of two entries for one T key (a
// damaged copy replaced while both were in the journal), always of two
// runs, the later wins.
type timed struct {
	ts  uint64
	hi  uint64 // the id's first 8 bytes
	id  *[32]byte
	run int32
}

func compareTimed(x, y *timed) int {
	if c := cmp.Compare(x.ts, y.ts); c != 0 {
		return c
	}
	if c := cmp.Compare(x.hi, y.hi); c != 0 {
		return c
	}
	if c := bytes.Compare(x.id[:], y.id[:]); c != 0 {
		return c
	}
	return cmp.Compare(x.run, y.run)
}

// timeOrder returns the timed entries of runs in T key order, the later
// of two for one key last.
func timeOrder(runs []journalRun) []timed {
	n := 0
	for _, r := range runs {
		n += len(r.v) / journalEntryLen
	}
	// Each run is in that order already. Placed by their first
	// created_at, the runs come nearly sorted (a crawl's shards page
	// disjoint ranges, page after page), which the sort then only mends:
	// 30 -> 13 ms for 128Ki entries of a 4-shard crawl's pages
	// (BenchmarkTimeOrder).
	byLo := make([]int32, len(runs))
	for i := range byLo {
		byLo[i] = int32(i)
	}
	slices.SortStableFunc(byLo, func(x, y int32) int { return cmp.Compare(runs[x].lo, runs[y].lo) })
	out := make([]timed, 0, n)
	for _, ri := range byLo {
		r := runs[ri]
		for e := r.v; len(e) >= journalEntryLen; e = e[journalEntryLen:] {
			ts := entryTime(e)
			if ts == noTime {
				break // untimed entries come last
			}
			id := (*[32]byte)(e[:idLen])
			out = append(out, timed{ts: ts, hi: binary.BigEndian.Uint64(id[:8]), id: id, run: ri})
		}
	}
	slices.SortFunc(out, func(x, y timed) int { return compareTimed(&x, &y) })
	return out
}

// superseded reports whether byTime[i] (in timeOrder) is followed by an
// entry of the same T key: a later run's, which wins.
func superseded(byTime []timed, i int) bool {
	return i+1 < len(byTime) && byTime[i+1].ts == byTime[i].ts && *byTime[i+1].id == *byTime[i].id
}

// setEventKeys sets the E keys of entries.
func setEventKeys(set setFunc, entries []foldEntry) error {
	var k [1 + idLen]byte
	k[0] = prefixEvent
	for i := range entries {
		copy(k[1:], entries[i].id[:])
		if err := set(k[:], entries[i].v[:]); err != nil {
			return err
		}
	}
	return nil
}

// setTimeKeys sets the T keys of byTime, the later of two for one key.
func setTimeKeys(set setFunc, byTime []timed, runs []journalRun) error {
	var k [1 + 8 + idLen]byte
	k[0] = prefixIDs
	var v [4]byte
	for i := range byTime {
		t := &byTime[i]
		if superseded(byTime, i) {
			continue
		}
		binary.BigEndian.PutUint64(k[1:], t.ts)
		copy(k[9:], t.id[:])
		binary.BigEndian.PutUint32(v[:], runs[t.run].relay)
		if err := set(k[:], v[:]); err != nil {
			return err
		}
	}
	return nil
}

// setSightingKeys sets the H keys of byTime (in T key order): the first
// relay's sightings. With one relay the order is the same; with more it
// sorts byTime by relay first, in place.
func setSightingKeys(set setFunc, byTime []timed, runs []journalRun) error {
	order := byTime
	relay := func(t *timed) uint32 { return runs[t.run].relay }
	if slices.ContainsFunc(runs, func(r journalRun) bool { return r.relay != runs[0].relay }) {
		slices.SortFunc(order, func(x, y timed) int {
			if c := cmp.Compare(relay(&x), relay(&y)); c != 0 {
				return c
			}
			return compareTimed(&x, &y)
		})
	}
	var k [sightingKeyLen]byte
	k[0] = prefixSighting
	var last [sightingKeyLen]byte
	for i := range order {
		t := &order[i]
		binary.BigEndian.PutUint32(k[1:], relay(t))
		binary.BigEndian.PutUint64(k[5:], t.ts)
		copy(k[13:], t.id[:])
		if i > 0 && k == last {
			continue
		}
		last = k
		if err := set(k[:], nil); err != nil {
			return err
		}
	}
	return nil
}

// writeFoldTable writes the keys that keys sets (in order) to a table at
// path, synced, with the store's table format, block size and filter (which
// holds the E keys: the T and H keys are left out, see keyFilter).
func (s *Store) writeFoldTable(path string, keys func(set setFunc) error) error {
	f, err := s.opts.FS.Create(path, "")
	if err != nil {
		return err
	}
	wo := sstable.WriterOptions{
		TableFormat:  s.db.TableFormat(),
		BlockSize:    s.opts.BlockSize,
		MergerName:   counterMerger.Name,
		FilterPolicy: newKeyFilter(),
		FilterType:   pebble.TableFilter,
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), wo)
	if err := keys(func(k, v []byte) error { return w.Set(k, v) }); err != nil {
		_ = w.Close()
		return err
	}
	return w.Close() // syncs and closes f
}

// loadJournal reads the journal keys a crash left into the pending map
// and runs. A damaged one is noted and left out. Of format 0 its events'
// bodies are in the log and their T and H keys list them, so a read-back
// finds them missing (errIndexedMissing) and the crawl fetches them
// again. Otherwise the index keys are lost with it while its batch's
// shard cursors say the range was fetched: it returns the relays of such
// keys, whose cursors then go (openJournal).
func (s *Store) loadJournal() (lost []uint32, err error) {
	s.pend.m = newJournalIndex(s.pend.foldAt)
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixJournal}, UpperBound: []byte{prefixJournal + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		n := 0
		switch {
		case len(k) == 9:
			n = journalEntryLenE
		case len(k) == 14 && k[9] == journalTimed:
			n = journalEntryLen
		default:
			s.noteDamage(corrupt(k, errors.New("journal key of an unknown form")))
			continue
		}
		s.pend.seq = binary.BigEndian.Uint64(k[1:9])
		v, err := it.ValueAndErr()
		if err == nil && len(v)%n != 0 {
			err = fmt.Errorf("journal value of %d bytes", len(v))
		}
		if err != nil {
			s.noteDamage(corrupt(k, err))
			if n == journalEntryLen {
				lost = append(lost, binary.BigEndian.Uint32(k[10:]))
			}
			continue
		}
		s.pend.runs = addJournal(s.pend.m, s.pend.runs, slices.Clone(v), n)
	}
	return lost, it.Error()
}

// openJournal loads the journal a crash left. A writable store drops the
// shard cursors of the relays whose journal keys it could not read (their
// crawls page again: what the archive holds is deduplicated), then folds
// the journal before anything reads E; a read-only one reads E through an
// overlay that holds it, and T and H through the runs.
func (s *Store) openJournal() error {
	lost, err := s.loadJournal()
	if err != nil {
		return fmt.Errorf("read event key journal: %w", err)
	}
	if s.pend.m.len() == 0 && len(lost) == 0 {
		return nil
	}
	if !s.opts.ReadOnly {
		if len(lost) > 0 {
			b := s.db.NewBatch()
			for _, relay := range lost {
				p := shardKey(relay, "")
				_ = b.DeleteRange(p, prefixEnd(p), nil)
			}
			err := b.Commit(pebble.Sync)
			b.Close()
			if err != nil {
				return fmt.Errorf("drop the cursors of damaged journal keys: %w", err)
			}
		}
		if err := s.fold(); err != nil {
			return fmt.Errorf("fold event key journal: %w", err)
		}
		return nil
	}
	o := s.db.NewIndexedBatch()
	var k [1 + idLen]byte
	k[0] = prefixEvent
	s.pend.m.each(func(e *foldEntry) {
		copy(k[1:], e.id[:])
		_ = o.Set(k[:], e.v[:], nil)
	})
	s.overlay, s.r = o, o
	return nil
}
