package rawstore

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// Copy is one event copy as a relay sent it.
type Copy struct {
	ID  [32]byte // the top-level id scanned from Raw (not yet verified)
	Raw []byte   // owned by the batch: the caller must not reuse it
	// CreatedAt, if Timed, is the created_at scanned with ID, so that
	// ingest, under its lock, need not scan Raw for it again.
	CreatedAt int64
	Timed     bool
}

// Malformed is a frame the scanner could not key by id. It is quarantined
// with its reason so that nothing received is silently dropped.
type Malformed struct {
	Raw    []byte
	Reason string
	// Key identifies the same bad frame across subscriptions (the frame
	// with its subscription id blanked); nil means Raw itself.
	Key []byte
	// Where, if set, says where the frame was found ("line 57" of an
	// import). It is kept with the copy but, unlike Reason, not counted:
	// reasons are a small set, places are not.
	Where string
}

// Batch is what one crawl step hands the store: events, bad frames, and
// the crawl state that is only true once those events are durable.
type Batch struct {
	Relay     uint32
	Events    []Copy
	Malformed []Malformed
	// Shards maps a job key to its new cursor state.
	Shards map[string][]byte
	// RelayRecord, if non-nil, replaces the relay's crawl-owned record.
	RelayRecord []byte
	// State, if set, is called under the store's ingest lock right before
	// the commit; the shard states it returns are added to Shards and a
	// non-nil record replaces RelayRecord. Batches commit in the order of
	// their State calls, so a caller deriving states from shared memory
	// (a shard queue) gets them to disk in that memory's order without
	// holding its own lock across the commit. An error aborts the batch.
	State func() (shards map[string][]byte, relayRecord []byte, err error)
}

// IngestResult says what the batch changed.
type IngestResult struct {
	New        int // ids seen for the first time
	Duplicates int // byte-identical copies of a stored id
	Variants   int // copies whose bytes differ from the stored one (queued for verify)
	Malformed  int // bad frames quarantined (not counting ones quarantined before)
	Repaired   int // copies that replaced a stored copy which could not be read back
}

// damagedCopy stands, in a lookup's result, for a stored copy that cannot
// be read back (version 0 is never written).
var damagedCopy = []byte{0, 0, 0, 0, 0}

// corruptIf wraps err as a CorruptError of key when it is Pebble's
// corruption.
func corruptIf(key []byte, err error) error {
	if pebble.IsCorruptionError(err) {
		return corrupt(key, err)
	}
	return err
}

// forgetDamagedVerdict deletes, in b, the verdict on id's damaged primary
// copy and moves its count back to pending (the copy replacing it is
// queued and judged anew).
func (s *Store) forgetDamagedVerdict(b *pebble.Batch, id *[32]byte, counts map[string]int64) error {
	v, err := s.get(verdictKey(id))
	if err != nil && !s.noteDamage(err) {
		return err
	}
	_ = b.Delete(verdictKey(id), nil)
	if len(v) < 1 {
		// Pending; or its verdict is unreadable too, and its count
		// cannot be moved (the counters may be one off for it).
		return nil
	}
	switch v[0] {
	case statusValid:
		counts[CounterValid]--
	case statusInvalid:
		counts[CounterInvalid]--
	default:
		return nil
	}
	counts[CounterPending]++
	return nil
}

// header of a version 1 E value: version byte, first relay (uint32 BE);
// see seen.go for version 2.
const eventHeaderLen = 5

// Ingest commits a batch atomically, durably unless the store is NoSync.
// Duplicates cost a lookup (plus a provenance key when a second relay
// serves an id); a copy whose bytes differ from the stored one is kept as
// an alternate and verified on its own, so a forged copy stored first
// never hides a valid one. It keeps no reference to in's bytes once it
// returns.
func (s *Store) Ingest(in *Batch) (IngestResult, error) {
	// The ids are looked up before taking the lock that orders dedup
	// decisions, so concurrent ingests overlap their reads; under the
	// lock only the ids of commits since are checked (see recentCommits).
	gen := s.recent.gen.Load()
	claimed := make([]bool, len(in.Events))
	known, err := s.lookup(in.Events, claimed)
	if err != nil {
		return IngestResult{}, fmt.Errorf("rawstore: look up batch of relay %s: %w", s.RelayURL(in.Relay), err)
	}
	bodies, err := s.writeBodies(in, known)
	if err != nil {
		return IngestResult{}, err
	}
	s.ingestMu.Lock()
	res, err := s.ingestLocked(in, known, claimed, gen, bodies)
	s.ingestMu.Unlock()
	if err != nil || s.sync != pebble.Sync {
		return res, err
	}
	// The batch went to the WAL unsynced so that the lock, which orders
	// every dedup decision, is not held across an fsync: concurrent
	// ingests then share one (Pebble groups the syncs of concurrent
	// commits). Syncing the WAL now makes this batch durable, and every
	// batch before it, among them any whose copies this one took as
	// duplicates, before the caller relies on it.
	if err := s.gate("sync batch for relay "+s.RelayURL(in.Relay), 0, func() error { return s.db.LogData(nil, pebble.Sync) }); err != nil {
		return res, err
	}
	return res, nil
}

// firstCopies holds writeBodies' maps of the ids a batch has a body for,
// reused: concurrent ingests write their bodies at once.
var firstCopies = sync.Pool{New: func() any { return map[[32]byte]bool{} }}

// written is where writeBodies put the bodies of a batch's new copies.
type written struct {
	locs []segLoc // by index in Batch.Events; seg 0: not written
	end  segPos   // the end of the last record (seg 0: none written)
}

// writeBodies appends to the segment log the bytes of every copy of in
// that the lookup found new (or damaged), the first of each id, and
// syncs them unless the store is NoSync: the batch that points at them
// must not become durable before them. It runs outside ingestMu, so
// concurrent ingests overlap their writes and syncs like their WAL syncs
// (see Ingest); a body whose id a concurrent ingest stored first stays
// behind, unreferenced.
func (s *Store) writeBodies(in *Batch, known map[[32]byte][]byte) (written, error) {
	var w written
	var bodies [][]byte
	var idx []int
	size := 0
	first := firstCopies.Get().(map[[32]byte]bool)
	defer func() { clear(first); firstCopies.Put(first) }()
	for i := range in.Events {
		c := &in.Events[i]
		if v, ok := known[c.ID]; (ok && v[0] != damagedCopy[0]) || first[c.ID] {
			continue
		}
		first[c.ID] = true
		bodies = append(bodies, c.Raw)
		idx = append(idx, i)
		size += segRecHeader + len(c.Raw)
	}
	if len(bodies) == 0 {
		return w, nil
	}
	what := "write event bodies for relay " + s.RelayURL(in.Relay)
	var locs []segLoc
	if err := s.gate(what, size, func() (err error) {
		locs, w.end, err = s.segs.appendBodies(bodies)
		return err
	}); err != nil {
		return w, err
	}
	if s.sync == pebble.Sync {
		if err := s.gate("sync "+what, 0, func() error { return s.segs.syncTo(w.end) }); err != nil {
			return w, err
		}
	}
	w.locs = make([]segLoc, len(in.Events))
	for j, i := range idx {
		w.locs[i] = locs[j]
	}
	return w, nil
}

// ingestLocked is Ingest under ingestMu, without the sync. inBatch holds
// the stored copies a lookup at generation gen found; copies put in this
// batch join it (Pebble cannot read them back). claimed[i] says the
// lookup added copy i's id to the id filter already. bodies says where
// the new copies' bytes are.
func (s *Store) ingestLocked(in *Batch, inBatch map[[32]byte][]byte, claimed []bool, gen uint64, bodies written) (IngestResult, error) {
	var res IngestResult
	if s.pendingCount() >= s.pend.foldAt {
		if err := s.fold(); err != nil {
			return res, err
		}
	}
	seen := s.now()
	if err := s.catchUp(in.Events, inBatch, gen); err != nil {
		return res, fmt.Errorf("rawstore: look up batch of relay %s: %w", s.RelayURL(in.Relay), err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	queue := !s.noQueue.Load()
	var altInBatch map[string]bool // alternate and malformed keys put in this batch
	var fresh []newCopy
	// This batch's new copies, for its own later copies of their ids:
	// one map, reused under ingestMu and emptied after (it points into
	// the batch, which the store must not keep).
	added := s.added
	defer clear(added)
	var newIDs, dups int64
	var later []sighting         // byte-identical copies of ids another relay served first
	counts := map[string]int64{} // counter deltas of replaced damaged copies
	var repaired []*[32]byte
	for i := range in.Events {
		c := &in.Events[i]
		// stored is the stored copy's bytes: from this batch or Pebble.
		stored, first := storedCopy(&c.ID, inBatch)
		damaged := len(stored) > 0 && stored[0] == damagedCopy[0]
		if m, ok := added[c.ID]; ok {
			stored, first, damaged = m.Raw, in.Relay, false
		} else if stored != nil {
			stored = inlineRaw(stored)
		}
		if damaged {
			// Its verdict judged bytes that are gone: forget it, and
			// store this copy as the primary, pending (counted as the
			// id's, not as a new one).
			if err := s.forgetDamagedVerdict(b, &c.ID, counts); err != nil {
				return res, err
			}
			if err := s.keepDamagedSource(b, in.Relay, c); err != nil {
				return res, err
			}
			stored = nil
			res.Repaired++
			repaired = append(repaired, &c.ID)
		}
		switch {
		case stored == nil:
			if bodies.locs == nil || bodies.locs[i].seg == 0 {
				// writeBodies wrote every id its lookup did not find,
				// and catchUp only finds more.
				return res, fmt.Errorf("rawstore: no body written for new event %x", c.ID[:8])
			}
			if s.ids != nil && !claimed[i] {
				s.ids.add(&c.ID) // before the commit: see idFilter
			}
			added[c.ID] = c
			nc := newCopy{sighting: newSighting(c), c: c, loc: bodies.locs[i]}
			if queue {
				nc.seq = s.pendingSeq.Add(1)
			}
			fresh = append(fresh, nc)
			if !damaged {
				newIDs++
				res.New++
			}
		case bytes.Equal(stored, c.Raw):
			if first != in.Relay {
				later = append(later, newSighting(c))
			}
			dups++
			res.Duplicates++
		default:
			if altInBatch == nil {
				altInBatch = map[string]bool{}
			}
			isNew, err := s.addVariant(b, in.Relay, c, altInBatch)
			if err != nil {
				return res, err
			}
			if first != in.Relay {
				_ = b.Merge(provKey(&c.ID, in.Relay), seenValue(seen), nil)
				addSighting(b, in.Relay, &c.ID, stored)
			}
			if isNew {
				res.Variants++
			} else {
				dups++
				res.Duplicates++
			}
		}
	}
	journal := setNew(b, fresh, in.Relay, seen)
	// Copies left out of the queue are found by the key-order scan only:
	// the mark that says so is durable with the first of them.
	markUnqueued := !queue && len(fresh) > 0 && !s.unqueued.Load()
	if markUnqueued {
		_ = b.Set(unqueuedKey, nil, nil)
	}
	setSightings(b, later, in.Relay, seen)
	malformed := 0
	for _, m := range in.Malformed {
		// A relay re-sends the frames of a page's boundary second on the
		// next page; a bad frame is quarantined and counted once.
		key := m.Key
		if key == nil {
			key = m.Raw
		}
		h := sha256.Sum256(key)
		k := append([]byte{prefixMalformed}, h[:]...)
		if altInBatch == nil {
			altInBatch = map[string]bool{}
		}
		if altInBatch[string(k)] {
			continue
		}
		altInBatch[string(k)] = true
		if _, closer, err := s.r.Get(k); err == nil {
			closer.Close()
			continue
		} else if !errors.Is(err, pebble.ErrNotFound) {
			return res, fmt.Errorf("rawstore: lookup malformed frame: %w", err)
		}
		malformed++
		res.Malformed++
		_ = b.Set(k, nil, nil)
		_ = b.Set(seqKey(prefixQuarant, s.quarSeq.Add(1)), quarantineValue(in.Relay, m.Reason, m.Where, nil, m.Raw), nil)
		_ = b.Merge(counterKey(reasonPrefix+m.Reason), delta(1), nil)
	}
	if newIDs > 0 {
		_ = b.Merge(counterKey(CounterEvents), delta(newIDs), nil)
		_ = b.Merge(counterKey(CounterPending), delta(newIDs), nil)
	}
	if dups > 0 {
		_ = b.Merge(counterKey(CounterDups), delta(dups), nil)
	}
	for name, d := range counts {
		if d != 0 {
			_ = b.Merge(counterKey(name), delta(d), nil)
		}
	}
	for name, n := range map[string]int{"new": res.New, "duplicates": res.Duplicates, "variants": res.Variants, "copies": len(in.Events), "malformed": malformed} {
		if n > 0 {
			_ = b.Merge(relayCounterKey(in.Relay, name), delta(int64(n)), nil)
		}
	}
	for job, state := range in.Shards {
		_ = b.Set(shardKey(in.Relay, job), state, nil)
	}
	record := in.RelayRecord
	if in.State != nil {
		more, rec, err := in.State()
		if err != nil {
			return res, err
		}
		if rec != nil {
			record = rec
		}
		for job, state := range more { // set last: they win over in.Shards
			_ = b.Set(shardKey(in.Relay, job), state, nil)
		}
	}
	if record != nil {
		_ = b.Set(relayKey(in.Relay), relayRecord(s.RelayURL(in.Relay), record), nil)
	}
	tail := s.segs.tail
	if tail.less(bodies.end) {
		// The end of every record of committed batches: what a
		// writable open keeps (see openSegments).
		tail = bodies.end
		_ = b.Set(segTailKey, tail.encode(), nil)
	}
	if err := s.commitJournal(b, journal, in.Relay, "commit batch for relay "+s.RelayURL(in.Relay)); err != nil {
		return res, err
	}
	s.segs.tail = tail
	if markUnqueued {
		s.unqueued.Store(true)
	}
	for _, id := range repaired {
		s.damage.repair(id)
	}
	if len(added) > 0 {
		s.recent.add(added)
	}
	for _, f := range fresh {
		if f.seq != 0 {
			s.hot.add(f.seq, in.Relay, f.c.Raw)
		}
	}
	return res, nil
}

// newCopy is a primary copy ingest stores: its copy and queue seq.
type newCopy struct {
	sighting
	c   *Copy
	loc segLoc // its bytes in the segment log
	seq uint64 // 0: not queued (see LeaveUnqueued)
}

// sighting is a copy's id and created_at, for its index keys (its T, H
// and R keys).
type sighting struct {
	id   *[32]byte
	idHi uint64 // the id's first 8 bytes, for sorting
	ts   uint64 // created_at
	tsOK bool   // false: unreadable, no T or H key
}

func newSighting(c *Copy) sighting {
	ts, ok := copyTime(c)
	return sighting{id: &c.ID, idHi: binary.BigEndian.Uint64(c.ID[:8]), ts: ts, tsOK: ok}
}

// byID orders sightings by id, comparing the first 8 bytes first.
func byID(x, y *sighting) int {
	if c := cmp.Compare(x.idHi, y.idHi); c != 0 {
		return c
	}
	return bytes.Compare(x.id[:], y.id[:])
}

// byTime orders sightings by created_at, then id: one relay's H keys sort
// as its T keys do.
func byTime(x, y *sighting) int {
	if c := cmp.Compare(x.ts, y.ts); c != 0 {
		return c
	}
	return byID(x, y)
}

// setSighting puts relay's H key of l in b (none without a created_at).
func (l *sighting) setSighting(b *pebble.Batch, relay uint32) {
	if l.tsOK {
		_ = b.Set(sightingKey(relay, l.ts, l.id), nil, nil)
	}
}

// setNew puts the P keys of fresh's queued copies (seq not 0) in b, and
// returns the journal value of their E, T and H keys (journal.go), in
// created_at order, then id, untimed copies last: the order of their T
// keys and of relay's H keys. It sorts pointers to the copies, not the
// copies, compared by created_at and the ids' first 8 bytes first.
func setNew(b *pebble.Batch, fresh []newCopy, relay, seen uint32) []byte {
	if len(fresh) == 0 {
		return nil
	}
	order := make([]*newCopy, len(fresh))
	for i := range fresh {
		order[i] = &fresh[i]
	}
	slices.SortFunc(order, func(x, y *newCopy) int {
		if x.tsOK != y.tsOK {
			if x.tsOK {
				return -1
			}
			return 1
		}
		return byTime(&x.sighting, &y.sighting)
	})
	for i := range fresh {
		if fresh[i].seq != 0 {
			_ = b.Set(seqKey(prefixPending, fresh[i].seq), fresh[i].id[:], nil)
		}
	}
	return journalValue(order, relay, seen)
}

// setSightings puts the R and H keys of later, byte-identical copies of
// ids another relay served first, in b, each kind together and in key
// order as setNew does: a crawl of a relay whose events the archive holds
// adds one random R key per event, and pages come newest first, so in
// arrival order every insert searched the skiplist from the top. The R
// values merge (earliest wins) and the H keys are empty, so the order of
// a batch's own repeats does not matter.
func setSightings(b *pebble.Batch, later []sighting, relay, seen uint32) {
	slices.SortFunc(later, func(x, y sighting) int { return byID(&x, &y) })
	first := seenValue(seen)
	for i := range later {
		_ = b.Merge(provKey(later[i].id, relay), first, nil)
	}
	slices.SortFunc(later, func(x, y sighting) int { return byTime(&x, &y) })
	for i := range later {
		later[i].setSighting(b, relay)
	}
}

// lookup returns the stored E values of the ids of evs that exist,
// looking up only those the id filter cannot prove new: a version 3
// value resolved (its body read from the log, for ingest to compare a
// copy's bytes), damagedCopy for one that cannot be read back. Unless
// claimed is nil, the ids the filter proves new are claimed (added to
// it), and claimed[i] says which.
func (s *Store) lookup(evs []Copy, claimed []bool) (map[[32]byte][]byte, error) {
	keys := make([][]byte, 0, len(evs))
	for i := range evs {
		switch {
		case s.ids == nil:
		case claimed != nil:
			if claimed[i] = s.ids.claim(&evs[i].ID); claimed[i] {
				continue
			}
		case s.ids.proveNew(&evs[i].ID):
			continue
		}
		keys = append(keys, eventKey(&evs[i].ID))
	}
	// Sized by the ids looked up: in a fresh crawl the filter proves most
	// new, and a table for the whole batch cost more than the lookups.
	found := make(map[[32]byte][]byte, len(keys))
	err := s.readStored(keys, func(k, v, raw []byte, err error) {
		id := [32]byte(k[1:])
		switch {
		case err != nil:
			// The stored copy cannot be read back: this copy
			// replaces it (see ingestLocked).
			found[id] = damagedCopy
		case v[0] != eventV3:
			found[id] = append([]byte(nil), v...)
		default:
			found[id] = eventValue(binary.BigEndian.Uint32(v[1:5]), uint32(eventSeen(v)), raw)
		}
	})
	return found, err
}

// readStored reads the stored copies of keys (E keys; sorted here) and
// calls fn with each that exists: its E value v and its body raw, or the
// damage (a *CorruptError, noted) that keeps it from being read back. v
// and raw are valid only during the call. One iterator serves the keys
// in id order: a prefix seek consults the bloom filters (of every level:
// see Open) without Get's per-call iterator setup, and sorted seeks reuse
// the blocks they load. The bodies in the log are then read in log
// order, a run of neighbours at a time: a relay's copies of stored events
// were mostly stored together (a page of another relay's), so a page of
// duplicates costs a few reads, not one per copy.
func (s *Store) readStored(keys [][]byte, fn func(k, v, raw []byte, err error)) error {
	if len(keys) == 0 {
		return nil
	}
	slices.SortFunc(keys, bytes.Compare)
	// The journal as it stands now, and an iterator opened only for an id
	// it does not hold: most repeats are of ids stored moments ago, and
	// an iterator per lookup was a third of its cost.
	pending := s.pendingSnapshot()
	var it *pebble.Iterator
	defer func() {
		if it != nil {
			it.Close()
		}
	}()
	bad := func(k []byte, err error) {
		s.noteDamage(err)
		fn(k, nil, nil, err)
	}
	var inLog [][]byte // E values whose bytes are in the segment log, key first
	for i, k := range keys {
		if i > 0 && bytes.Equal(k, keys[i-1]) {
			continue
		}
		if v, ok := s.pendingIn(pending, (*[32]byte)(k[1:])); ok {
			inLog = append(inLog, append(slices.Clip(k), v...))
			continue
		}
		if it == nil {
			// UseL6Filters: Pebble skips the last level's filters unless
			// asked, and the last level is where most random ids live.
			// Made after the snapshot, it holds every E key folded
			// before it was taken.
			var err error
			if it, _, err = s.eventIter(&pebble.IterOptions{LowerBound: []byte{prefixEvent}, UpperBound: []byte{prefixEvent + 1}, UseL6Filters: true}); err != nil {
				return err
			}
		}
		if it.SeekPrefixGE(k) && bytes.Equal(it.Key(), k) {
			v, err := value(it)
			if err == nil && eventHeaderSize(v) == eventLenV3 && v[0] == eventV3 {
				inLog = append(inLog, append(slices.Clip(k), v...))
				continue
			}
			var raw []byte
			if err == nil {
				_, raw, err = s.decodeEvent(k, v) // a header of version 1 or 2, or damage
			}
			if err != nil {
				bad(k, err)
				unexhaust(it, k)
				continue
			}
			fn(k, v, raw, nil)
		} else if err := it.Error(); err != nil {
			if err = corruptIf(k, err); !errors.As(err, new(*CorruptError)) {
				return err
			}
			bad(k, err)
			unexhaust(it, k)
		}
	}
	const kl = 1 + idLen
	slices.SortFunc(inLog, func(x, y []byte) int {
		p, q := segLocOf(x[kl:]).segPos, segLocOf(y[kl:]).segPos
		return cmp.Or(cmp.Compare(p.seg, q.seg), cmp.Compare(p.off, q.off))
	})
	var runKeys [][]byte
	var runLocs []segLoc
	var buf []byte // the runs' bytes, reused from one to the next
	for len(inLog) > 0 {
		runKeys, runLocs = runKeys[:0], runLocs[:0]
		first := segLocOf(inLog[0][kl:])
		end := first.off
		for _, kv := range inLog {
			l := segLocOf(kv[kl:])
			if l.seg != first.seg || l.off > end+segRunGap || l.off+segRecHeader+l.n-first.off > segRunMax && len(runLocs) > 0 {
				break
			}
			runKeys, runLocs = append(runKeys, kv[:kl]), append(runLocs, l)
			end = max(end, l.off+segRecHeader+l.n)
		}
		buf = s.segs.readRun(runKeys, runLocs, buf, func(i int, raw []byte, err error) {
			if err != nil {
				bad(runKeys[i], err)
				return
			}
			fn(runKeys[i], inLog[i][kl:], raw, nil)
		})
		inLog = inLog[len(runLocs):]
	}
	return nil
}

// A lookup reads the bodies of stored copies in runs: records at most
// segRunGap apart, spanning at most segRunMax.
const (
	segRunGap = 64 << 10
	segRunMax = 4 << 20
)

// catchUp adds to known the copies of evs that commits after generation
// gen stored: a lookup outside ingestMu could not see them.
func (s *Store) catchUp(evs []Copy, known map[[32]byte][]byte, gen uint64) error {
	later, ok := s.recent.since(gen)
	if len(later) == 0 && ok {
		return nil
	}
	var missed []Copy
	for i := range evs {
		if _, found := known[evs[i].ID]; found {
			continue
		}
		for _, ids := range later {
			if _, hit := ids[evs[i].ID]; hit {
				missed = append(missed, evs[i])
				break
			}
		}
		if !ok { // too far behind to tell: look every unknown id up again
			missed = append(missed, evs[i])
		}
	}
	if len(missed) == 0 {
		return nil
	}
	found, err := s.lookup(missed, nil)
	maps.Copy(known, found)
	return err
}

// storedCopy returns the E value for id (stored, or put in this batch)
// and the relay that first served it; nil if the id is new.
func storedCopy(id *[32]byte, known map[[32]byte][]byte) ([]byte, uint32) {
	v, ok := known[*id]
	if !ok {
		return nil, 0
	}
	return v, binary.BigEndian.Uint32(v[1:5])
}

// addVariant stores a differing copy under A|id|sha256(raw) unless that exact copy
// is already there (in the DB or this batch); it reports whether it was new.
func (s *Store) addVariant(b *pebble.Batch, relay uint32, c *Copy, inBatch map[string]bool) (bool, error) {
	h := sha256.Sum256(c.Raw)
	k := altKey(&c.ID, h[:])
	if inBatch[string(k)] {
		return false, nil
	}
	inBatch[string(k)] = true
	// The key names the bytes, so existence is enough: a copy verified
	// before (its key kept, emptied) is not verified or counted again.
	if _, closer, err := s.r.Get(k); err == nil {
		closer.Close()
		return false, nil
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return false, fmt.Errorf("rawstore: lookup variant %x: %w", c.ID[:8], err)
	}
	_ = b.Set(k, eventValue(relay, s.now(), c.Raw), nil)
	_ = b.Set(seqKey(prefixPending, s.pendingSeq.Add(1)), k[1:], nil)
	return true, nil
}

// quarantine values: relay (4), reason length (1), reason, flags (1), id
// (32, if flags&quarID), where length (1) and where (if flags&quarWhere), raw.
func quarantineValue(relay uint32, reason, where string, id *[32]byte, raw []byte) []byte {
	reason, where = clip255(reason), clip255(where)
	v := binary.BigEndian.AppendUint32(nil, relay)
	v = append(v, byte(len(reason)))
	v = append(v, reason...)
	var flags byte
	if id != nil {
		flags |= quarID
	}
	if where != "" {
		flags |= quarWhere
	}
	v = append(v, flags)
	if id != nil {
		v = append(v, id[:]...)
	}
	if where != "" {
		v = append(v, byte(len(where)))
		v = append(v, where...)
	}
	return append(v, raw...)
}

// Flags of a quarantine value.
const (
	quarID    byte = 1
	quarWhere byte = 2
)

func clip255(s string) string {
	if len(s) > 255 {
		return s[:255]
	}
	return s
}
