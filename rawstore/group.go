package rawstore

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"
)

// A commit group gathers staged batches (Stage) into one Pebble batch.
// Pebble takes a batch of at least half a memtable into its flush queue as
// it is (a flushable batch: sorted once, flushed like a memtable) instead
// of inserting every key into the memtable's skiplist, whose inserts and
// fresh arena pages were a quarter of a crawl's CPU (docs/PERFORMANCE.md).
// So the group commits when it reaches that size, or GroupDelay after its
// first batch (a slow relay waits no longer), or when anything needs it
// durable: Ingest, Flush, Close, a verify scan.
//
// Order is kept: batches enter the group in the order of their State
// calls and every commit takes the whole group, so a cursor never reaches
// disk before the events it passed, and a crash loses a suffix of staged
// batches, cursors and events together. Dedup sees the group: a staged
// copy is found in it until the commit, and in Pebble after.
type commitGroup struct {
	b     *pebble.Batch        // nil: no group open
	ids   map[[32]byte]valSpan // the primary copies b stores: where their E values are in b
	keys  map[string]bool      // the alternate and malformed keys b stores
	hot   []hotFresh           // the copies for s.hot once b is committed
	done  []func()             // Batch.Committed of the batches in b
	seq   uint64               // numbers groups, so that a late timer leaves the next alone
	timer *time.Timer
	// failed is a commit that failed after Pebble took the batch: it cannot
	// be retried, and committing later batches without it would put their
	// cursors past lost events, so every later write is refused.
	failed error
	closed bool
	// want sizes the next group's buffer (see addToGroup); cap is the
	// open group's.
	want, cap int
	// commits counts the commits by what made them: full, timed, asked.
	commits [3]int
}

// What made a group commit.
const (
	groupFull = iota
	groupTimed
	groupAsked
)

var errClosed = errors.New("rawstore: store closed")

// newKeysLen bounds what a new copy's keys and headers add to a batch
// besides its bytes: E, T and P keys, an E value header, varints.
const newKeysLen = 160

// valSpan is where a value is in a batch's representation.
type valSpan struct{ off, n uint32 }

type hotFresh struct {
	seq   uint64
	relay uint32
	raw   []byte
}

// committedGroup is what remains to do for a committed group once
// ingestMu is released: the sync, then the callbacks.
type committedGroup struct{ done []func() }

// DefaultGroupDelay bounds how long a staged batch waits for its group to
// fill before it is committed.
const DefaultGroupDelay = time.Second

// groupBytes is the size at which a group commits: over half a memtable,
// Pebble's threshold for a flushable batch. A batch's memtable size (what
// Pebble compares) is at least its length: each entry's skiplist node
// costs more than its batch header.
func (s *Store) groupBytes() int {
	return int(s.opts.MemTableSize)
}

// value returns the E value a staged primary copy has in the group.
func (g *commitGroup) value(sp valSpan) []byte {
	return g.b.Repr()[sp.off : sp.off+sp.n]
}

// add appends stage batch b to the group, with the primary copies it
// stores (fresh, their E values at offsets in b) and the keys of its
// alternate and malformed copies. Called with ingestMu held.
func (s *Store) addToGroup(b *pebble.Batch, fresh []newCopy, keys map[string]bool, relay, seen uint32, done func()) error {
	g := &s.group
	if g.failed != nil {
		return g.failed
	}
	if g.closed {
		return errClosed
	}
	if g.b == nil {
		// A group's buffer is sized to what the groups before it took,
		// so that it seldom grows (each growth copies it), and a slow
		// relay's small groups stay small.
		g.cap = max(g.want, 1<<20)
		g.b = s.db.NewBatchWithSize(g.cap)
		adviseHuge(g.b.Repr())
		g.ids = make(map[[32]byte]valSpan, len(fresh))
		g.seq++
		seq := g.seq
		g.timer = time.AfterFunc(s.opts.GroupDelay, func() { s.commitTimedOut(seq) })
	}
	need := g.b.Len() + b.Len()
	for i := range fresh {
		need += len(fresh[i].c.Raw) + newKeysLen
	}
	if need > g.cap {
		for g.cap < need {
			g.cap = min(2*g.cap, max(s.groupBytes()+2<<20, need))
		}
		grown := s.db.NewBatchWithSize(g.cap)
		adviseHuge(grown.Repr())
		if err := grown.Apply(g.b, nil); err != nil {
			g.failed = err
			return err
		}
		_ = g.b.Close()
		g.b = grown
	}
	// The new copies go straight into the group (they are most of its
	// bytes); the rest of the batch, built apart so that a failure half
	// way left the group alone, is appended.
	setNew(g.b, fresh, relay, seen)
	for i := range fresh {
		g.ids[fresh[i].c.ID] = valSpan{fresh[i].off, fresh[i].n}
	}
	if err := g.b.Apply(b, nil); err != nil {
		// Only a corrupt batch fails, which ours are not; the group
		// would then be, so nothing commits after it.
		g.failed = err
		return err
	}
	for k := range keys {
		if g.keys == nil {
			g.keys = map[string]bool{}
		}
		g.keys[k] = true
	}
	if s.hot.budget > 0 {
		for _, f := range fresh {
			g.hot = append(g.hot, hotFresh{f.seq, relay, f.c.Raw})
		}
	}
	if done != nil {
		g.done = append(g.done, done)
	}
	return nil
}

// groupIsFull reports whether the open group is big enough to commit.
func (s *Store) groupIsFull() bool {
	return s.group.b != nil && s.group.b.Len() >= s.groupBytes()
}

// commitGroupLocked commits the open group, unsynced; nil if none was
// open. A refused commit (no space) keeps the group for the next attempt.
// Called with ingestMu held.
func (s *Store) commitGroupLocked(why int) (*committedGroup, error) {
	g := &s.group
	if g.failed != nil {
		return nil, g.failed
	}
	if g.b == nil {
		return nil, nil
	}
	took := false
	if err := s.gate("commit ingest batches", g.b.Len(), func() error {
		took = true
		return g.b.Commit(pebble.NoSync)
	}); err != nil {
		if took {
			g.failed = err
		}
		return nil, err
	}
	switch why {
	case groupFull:
		g.want = s.groupBytes() + 2<<20
	case groupTimed:
		g.want = min(max(2*g.b.Len(), 1<<20), s.groupBytes()+2<<20)
	}
	g.commits[why]++
	_ = g.b.Close()
	if g.timer != nil {
		g.timer.Stop()
	}
	if len(g.ids) > 0 {
		s.recent.add(g.ids)
	}
	for _, h := range g.hot {
		s.hot.add(h.seq, h.relay, h.raw)
	}
	c := &committedGroup{done: g.done}
	g.b, g.ids, g.keys, g.hot, g.done, g.timer = nil, nil, nil, nil, nil, nil
	return c, nil
}

// finishGroup makes a committed group durable (unless the store is
// NoSync) and calls its batches' callbacks. The sync is outside ingestMu,
// which orders every dedup decision: concurrent ingests then share one
// fsync (Pebble groups them), and syncing the WAL makes every earlier
// batch durable too, among them any whose copies later ones took as
// duplicates.
func (s *Store) finishGroup(c *committedGroup) error {
	if c == nil {
		return nil
	}
	if s.sync == pebble.Sync {
		if err := s.gate("sync ingest batches", 0, func() error { return s.db.LogData(nil, pebble.Sync) }); err != nil {
			return err
		}
	}
	for _, f := range c.done {
		f()
	}
	return nil
}

// commitTimedOut commits group seq if it is still open.
func (s *Store) commitTimedOut(seq uint64) {
	s.ingestMu.Lock()
	g := &s.group
	if g.seq != seq || g.b == nil || g.closed {
		s.ingestMu.Unlock()
		return
	}
	c, err := s.commitGroupLocked(groupTimed)
	if err != nil && g.failed == nil && g.b != nil {
		g.timer = time.AfterFunc(s.opts.GroupDelay, func() { s.commitTimedOut(seq) })
	}
	s.ingestMu.Unlock()
	if err == nil {
		err = s.finishGroup(c)
	}
	if err != nil {
		s.opts.Logger.Warn("staged ingest batches not committed", zap.String("dir", s.opts.Dir), zap.Error(err))
	}
}

// Flush commits and syncs every staged batch.
func (s *Store) Flush() error {
	s.ingestMu.Lock()
	c, err := s.commitGroupLocked(groupAsked)
	s.ingestMu.Unlock()
	if err != nil {
		return err
	}
	return s.finishGroup(c)
}

// flushLocked is Flush for a caller holding ingestMu.
func (s *Store) flushLocked() error {
	c, err := s.commitGroupLocked(groupAsked)
	if err != nil {
		return err
	}
	return s.finishGroup(c)
}

// closeGroup commits the open group and refuses every later stage.
func (s *Store) closeGroup() error {
	s.ingestMu.Lock()
	c, err := s.commitGroupLocked(groupAsked)
	s.group.closed = true
	if s.group.timer != nil {
		s.group.timer.Stop()
	}
	n := s.group.commits
	s.ingestMu.Unlock()
	if n != [3]int{} {
		s.opts.Logger.Debug("ingest commit groups", zap.String("dir", s.opts.Dir),
			zap.Int("full", n[groupFull]), zap.Int("timed", n[groupTimed]), zap.Int("asked", n[groupAsked]))
	}
	if err != nil {
		return err
	}
	return s.finishGroup(c)
}

// collectFlushedGroups is a FlushEnd listener: a flushed commit group (a
// flushable batch is flushed with the memtable before it, so the flush
// has two inputs or more) leaves its buffer, half a memtable, as Go
// garbage. Collecting it then, instead of at a heap twice the size of
// what is live, lets the next group reuse its pages: fewer page faults,
// and a crawl's RSS stays under its budget (docs/PERFORMANCE.md). The
// collection runs apart, one at a time; its marking is small, the
// buffers holding no pointers.
func collectFlushedGroups(running *atomic.Bool) func(pebble.FlushInfo) {
	return func(fi pebble.FlushInfo) {
		if fi.Input < 2 || fi.Err != nil || !running.CompareAndSwap(false, true) {
			return
		}
		go func() {
			defer running.Store(false)
			runtime.GC()
		}()
	}
}
