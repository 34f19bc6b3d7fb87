// Package lazyparse verifies stored events off the receive path: a pool
// takes queued copies from the raw store in batches, parses each, recomputes
// the NIP-01 id from the canonical serialization, checks the BIP-340
// signature, and records a verdict. The crawl never waits for it.
package lazyparse

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nostr-archiver/archiver/bip340"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/rawstore"
	"go.uber.org/zap"
)

// Reasons recorded for invalid copies.
const (
	ReasonMalformed  = "malformed"   // not a well-formed NIP-01 event object
	ReasonIDMismatch = "id-mismatch" // the id is not sha256 of the canonical serialization
	ReasonBadSig     = "bad-sig"     // the BIP-340 signature does not verify
	ReasonBadPubKey  = "bad-pubkey"  // the pubkey is not an x coordinate on the curve
)

// Verifier checks a batch of BIP-340 signatures: it sets reasons[i] to ""
// when items[i] verifies, otherwise to ReasonBadSig or ReasonBadPubKey.
// Batches let the verifier share work between signatures (bip340's batch
// verification). Each worker gets its own Verifier from
// Options.NewVerifier, so implementations may keep per-worker scratch
// without locks.
type Verifier func(items []bip340.Item, reasons []string)

// Options configure a Pool.
type Options struct {
	Store       *rawstore.Store
	Workers     int // parallel verifiers; default GOMAXPROCS
	BatchSize   int // copies per store round trip; default 1024
	NewVerifier func() Verifier
	Logger      *zap.Logger
	Metrics     *Metrics // optional
	// Idle is how long Run sleeps when the queue is empty and nobody
	// calls Notify; default 200ms.
	Idle time.Duration
	// OnJudged, if set, sees each judged batch (items with their bytes,
	// verdicts) on the pool's loop, e.g. to find relay URLs in the valid
	// events. It must be quick and must not keep the slices.
	OnJudged func(items []rawstore.Pending, vs []rawstore.Verdict)
}

// unqueuedFraction is the share of an archive's ids pending from which a
// run that verifies nothing leaves its copies out of the queue (see
// ScannedLater).
const unqueuedFraction = 0.125

func (o *Options) setDefaults() {
	if o.Workers == 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.BatchSize == 0 {
		o.BatchSize = 1024
	}
	if o.NewVerifier == nil {
		o.NewVerifier = DefaultVerifiers()
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Idle == 0 {
		o.Idle = 200 * time.Millisecond
	}
}

// Validate reports the first bad option.
func (o *Options) Validate() error {
	switch {
	case o.Store == nil:
		return errors.New("lazyparse: Store is required")
	case o.Workers < 1:
		return fmt.Errorf("lazyparse: Workers %d < 1", o.Workers)
	case o.BatchSize < 1:
		return fmt.Errorf("lazyparse: BatchSize %d < 1", o.BatchSize)
	}
	return nil
}

// Pool is the verify worker pool.
type Pool struct {
	opts   Options
	judges []*Judge // one per worker
	wake   chan struct{}
	alive  atomic.Int64 // unix nanos of Run's latest loop, for a watchdog
}

// New builds a pool; it does nothing until Run or Drain.
func New(opts Options) (*Pool, error) {
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	p := &Pool{opts: opts, wake: make(chan struct{}, 1)}
	for i := 0; i < opts.Workers; i++ {
		j := NewJudge(opts.NewVerifier())
		j.index = true // Apply takes the keys instead of parsing again
		p.judges = append(p.judges, j)
	}
	return p, nil
}

// Notify tells a Run loop that new copies were queued. It never blocks.
func (p *Pool) Notify() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Alive returns when Run last went round its loop (zero if it never ran):
// a watchdog's proof that verification is not stuck.
func (p *Pool) Alive() time.Time {
	if n := p.alive.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Run verifies until ctx is done. An archive with pending copies in no
// queue entry (NeedsScan: its verdicts were reset, or a run that verified
// nothing left them out) is scanned first, ingest waiting meanwhile.
func (p *Pool) Run(ctx context.Context) error {
	if p.opts.Store.NeedsScan() {
		p.opts.Logger.Warn("some pending events are in no verify queue (verdicts were reset, or a crawl or import stored them unverified): verifying the archive in key order first; crawls wait for it")
		n, err := p.scan(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		p.opts.Logger.Info("verified the archive in key order", zap.Int("copies", n))
	}
	// The queue is taken from memory, right behind ingest: reading copies
	// back from disk while a crawl is storing costs more than verifying
	// them, so those are deferred (left queued) and taken by a second
	// cursor, one batch at a time, only while ingest is light; a final
	// Drain takes what remains.
	var last uint64 // the queue seq passed, right behind ingest
	var cold uint64 // where the deferred copies are taken from
	behind := false // copies were deferred since cold last reached the end
	recent := 0     // copies judged from memory since the last wait
	for {
		// Checked every batch, not only when idle: with a backlog the
		// loop never idles, and a stop must not wait for the backlog.
		if ctx.Err() != nil {
			return nil
		}
		p.alive.Store(time.Now().UnixNano())
		n, deferred, err := p.step(&last, false)
		if err != nil {
			return err
		}
		behind = behind || deferred > 0
		recent += n
		if n+deferred > 0 {
			continue
		}
		if behind && recent < p.opts.BatchSize/8 {
			m, _, err := p.step(&cold, true)
			if err != nil {
				return err
			}
			if m == 0 {
				cold, behind = 0, false
			}
			continue
		}
		recent = 0
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake:
		case <-time.After(p.opts.Idle):
		}
	}
}

// Drain verifies every pending copy (or until ctx is done) and returns
// how many copies it judged: those in no queue entry (NeedsScan) by a
// key-order scan, the rest from the queue (rawstore.DrainQueue: the
// bodies in the order they were stored, a run at a time). The queue is
// taken however large the backlog: key order reads the bodies at random,
// one at a time (BenchmarkDrain in rawstore).
func (p *Pool) Drain(ctx context.Context) (int, error) {
	total := 0
	if p.opts.Store.NeedsScan() {
		n, err := p.scan(ctx)
		total += n
		if err != nil {
			return total, err
		}
	}
	// From the start: Run may have left copies behind.
	n, err := p.opts.Store.DrainQueue(ctx, p.opts.BatchSize, p.judgeBatch)
	return total + n, backlogErr(ctx, "verify the queue", err)
}

// ScannedLater reports whether a run that verifies nothing should leave
// the copies it stores out of the queue (rawstore.Store.LeaveUnqueued):
// when the store already NeedsScan, or when at least unqueuedFraction of
// its ids is pending, a backlog that one key-order scan (which reads
// every id) may as well verify. Queued, the copies cost the run their
// entries and the drain their deletes and a seek each, more than key
// order's random body reads: a 1M `crawl --no-verify` then `reprocess`
// took 6.6-7.4 + 43.3-43.8 CPU-s unqueued, 8.1-8.2 + 49.3-49.7 queued
// (docs/PERFORMANCE.md, session 32). Either way every copy is verified:
// LeaveUnqueued makes the store NeedsScan, which Drain and Run honour.
func ScannedLater(store *rawstore.Store) (bool, error) {
	if store.NeedsScan() {
		return true, nil
	}
	st, err := store.Stats()
	if err != nil {
		return false, err
	}
	return float64(st.Pending) >= unqueuedFraction*float64(st.Events), nil
}

// judgeBatch is the rawstore.Judge of a drain or a scan.
func (p *Pool) judgeBatch(items []rawstore.Pending, vs []rawstore.Verdict) error {
	p.alive.Store(time.Now().UnixNano())
	start := time.Now()
	p.judge(items, vs)
	p.observe(vs, start)
	p.judged(items, vs)
	return nil
}

// scan judges the pending copies in key order (rawstore.ScanPending).
func (p *Pool) scan(ctx context.Context) (int, error) {
	n, err := p.opts.Store.ScanPending(ctx, p.opts.BatchSize, p.judgeBatch)
	return n, backlogErr(ctx, "verify in key order", err)
}

// backlogErr is what a pass through the backlog returns: nil, ctx's
// error if it was stopped, or err naming the pass.
func backlogErr(ctx context.Context, pass string, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		return fmt.Errorf("lazyparse: %s: %w", pass, err)
	}
}

// step judges one batch from the queue after *cursor, advances the cursor
// and returns how many copies it judged. Unless full, it takes only
// copies still in memory and reports how many others it deferred (left
// queued behind the cursor).
func (p *Pool) step(cursor *uint64, full bool) (judged, deferred int, err error) {
	items, err := p.opts.Store.NextPending(*cursor, p.opts.BatchSize)
	if err != nil || len(items) == 0 {
		return 0, 0, err
	}
	last := items[len(items)-1].Seq
	if !full {
		ready := items[:0]
		for i := range items {
			if p.opts.Store.LoadHot(&items[i]) {
				ready = append(ready, items[i])
			}
		}
		deferred = len(items) - len(ready)
		items = ready
	}
	start := time.Now()
	if full {
		if err := p.opts.Store.LoadAll(items); err != nil {
			return 0, 0, fmt.Errorf("lazyparse: load queued copies: %w", err)
		}
	}
	verdicts := make([]rawstore.Verdict, len(items))
	p.judge(items, verdicts)
	if err := p.opts.Store.Apply(items, verdicts); err != nil {
		return 0, 0, fmt.Errorf("lazyparse: apply verdicts: %w", err)
	}
	*cursor = last
	p.observe(verdicts, start)
	p.judged(items, verdicts)
	return len(items), deferred, nil
}

func (p *Pool) judged(items []rawstore.Pending, vs []rawstore.Verdict) {
	if p.opts.OnJudged != nil {
		p.opts.OnJudged(items, vs)
	}
}

func (p *Pool) observe(vs []rawstore.Verdict, start time.Time) {
	if m := p.opts.Metrics; m != nil {
		m.observe(vs, time.Since(start))
	}
}

// judge fills verdicts[i] for items[i]. The workers take chunks of
// JudgeChunk items in turn until none is left, so one descheduled worker
// (the store's reader and compactions share the cores) does not leave the
// others idle at the end of the batch.
func (p *Pool) judge(items []rawstore.Pending, verdicts []rawstore.Verdict) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < len(p.judges) && w*JudgeChunk < len(items); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lo := int(next.Add(JudgeChunk)) - JudgeChunk
				if lo >= len(items) {
					return
				}
				hi := min(lo+JudgeChunk, len(items))
				p.judges[w].Run(items[lo:hi], verdicts[lo:hi])
			}
		}()
	}
	wg.Wait()
}

// JudgeChunk is what a worker takes at a time: two of bip340's 64-signature
// batch checks.
const JudgeChunk = 128

// A Judge decides copies the way each pool worker does, without a store:
// for tools that check events outside an archive, and to measure the
// verifier alone. It keeps its scratch between calls, so it is for one
// goroutine; give each its own.
type Judge struct {
	verify  Verifier
	buf     []byte         // canonical serializations
	sigs    []bip340.Item  // point into the parsed events
	events  []*event.Event // events[k] is the event of sigs[k]
	of      []int          // sigs[k] is the signature of items[of[k]]
	reasons []string
	index   bool // give valid verdicts their index keys (Verdict.Index)
}

// NewJudge returns a Judge checking signatures with verify (from
// DefaultVerifiers, say).
func NewJudge(verify Verifier) *Judge { return &Judge{verify: verify} }

// Run sets vs[i] to the verdict on items[i] (items without bytes, already
// resolved, are left alone): parse, recompute the id, then check every
// signature that got that far in one batch. It panics if len(vs) <
// len(items).
func (j *Judge) Run(items []rawstore.Pending, vs []rawstore.Verdict) {
	j.sigs, j.events, j.of = j.sigs[:0], j.events[:0], j.of[:0]
	for i := range items {
		if items[i].Raw == nil {
			continue
		}
		e, err := event.Parse(items[i].Raw)
		if err != nil || e.ID != items[i].ID {
			// Unparsable, or the scanner keyed the copy by a different id
			// than a full parse finds: the object is ambiguous, so it is
			// not this event.
			vs[i] = rawstore.Verdict{Reason: ReasonMalformed}
			continue
		}
		var sum [32]byte
		if sum, j.buf = e.ComputeID(j.buf); sum != e.ID {
			vs[i] = rawstore.Verdict{Reason: ReasonIDMismatch}
			continue
		}
		j.sigs = append(j.sigs, bip340.Item{PubKey: &e.PubKey, Msg: &e.ID, Sig: &e.Sig})
		j.events = append(j.events, e)
		j.of = append(j.of, i)
	}
	j.reasons = slices.Grow(j.reasons[:0], len(j.sigs))[:len(j.sigs)]
	if len(j.sigs) > 0 {
		j.verify(j.sigs, j.reasons)
	}
	for k, i := range j.of {
		if j.reasons[k] == "" {
			vs[i] = rawstore.Verdict{Valid: true}
			if j.index {
				vs[i].Index = rawstore.IndexKeys(j.events[k])
			}
		} else {
			vs[i] = rawstore.Verdict{Reason: j.reasons[k]}
		}
	}
	clear(j.sigs) // do not keep the batch's events alive
	clear(j.events)
}
