package daemon

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/sched"
	"go.uber.org/zap"
)

// Relay states shown by /status.
const (
	StateBackfill = "backfill" // paging history
	StateLive     = "live"     // tailing new events until the next catch-up
	StateWaiting  = "waiting"  // the last pass failed; retrying after a pause
	StateStopped  = "stopped"  // finished a bounded job (until set), or stopping
)

// relayLoop keeps one relay archived while the scheduler (package
// sched) has it: backfill (a crawl job that resumes where the last run
// stopped and, for an open range, extends to now), then a live tail until
// the catch-up interval passes, then the backfill job again (it extends
// from just before the last run's end, which catches events backdated
// past the tail), and so on. A failed pass or tail ends the run: the
// scheduler backs the relay off and runs it again later, with no
// goroutine meanwhile.
type relayLoop struct {
	d     *Daemon
	cfg   config.Relay
	found *Discovered // where discovery learned it; nil for a configured relay
	log   *zap.Logger

	mu               sync.Mutex
	state            string
	backfillComplete bool
	last             crawl.Result
	passes           int
	// readBack: a pass of this process read back (and proved readable)
	// what earlier runs stored of the relay; later passes skip that while
	// the store has met no damage since.
	readBack bool
	// rechecked is when the last pass that rechecked the relay's earlier
	// ranges started (zero: none in this process).
	rechecked time.Time
	// tail is the live tail while it runs (ensureTail, stopTail).
	tail *liveTail
	// tailYields: the relay refused a pass a connection while the tail
	// held one (yieldTail); passes stop the tail while they run.
	tailYields bool
}

// startRelaysLocked hands every relay of cfg not known yet to the
// scheduler. Caller holds d.mu.
func (d *Daemon) startRelaysLocked(cfg *config.Config) {
	for _, rc := range cfg.Relays {
		d.addRelayLocked(rc, nil)
	}
}

func (l *relayLoop) set(f func(l *relayLoop)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l)
}

// run runs the relay until a pass fails, a bounded job is done, or ctx
// ends. It holds the host's lease (one heavy pass per host) through each
// backfill. The live tail needs none: it starts with the run's first
// pass and runs beside the passes, since an event published with an old
// created_at (a user's history sent to a relay they just added, a
// rebroadcast) lies in a range a pass has paged, and only a subscription
// open when it arrives sees it. Once the relay refuses a pass's
// connection with HTTP 429 (one allowed per address), the tail is
// stopped and later passes stop it while they run (yieldTail).
func (l *relayLoop) run(ctx context.Context, lease *sched.Lease) sched.Outcome {
	defer l.stopTail()
	got := false // some pass got through: the scheduler restarts the failure count
	for ctx.Err() == nil {
		if lease.Acquire(ctx) != nil {
			break
		}
		l.mu.Lock()
		yields := l.tailYields
		l.mu.Unlock()
		start := time.Now()
		switch {
		case yields:
			l.stopTail()
		case l.cfg.Live && l.cfg.Until == 0:
			l.ensureTail(ctx, start.Add(-time.Duration(l.cfg.TailOverlap)).Unix())
		}
		l.set(func(l *relayLoop) { l.state = StateBackfill })
		recheck := l.recheckDue(start)
		res := l.backfill(ctx, recheck)
		lease.Release()
		if ctx.Err() != nil {
			break
		}
		// Incomplete walls, unproven ranges and damage the relay did not
		// serve again are reported, not retried at once: paging the same
		// relay again soon would yield the same.
		// The live tail goes on, but the backfill is complete only when
		// drained: /status's backfill_complete is a promise.
		ok := res.Finish == crawl.FinishDrained || res.Finish == crawl.FinishIncompleteWalls || res.Finish == crawl.FinishUnproven ||
			res.Finish == crawl.FinishDamaged
		l.set(func(l *relayLoop) {
			l.last, l.passes = res, l.passes+1
			l.readBack = l.readBack || ok && res.Finish != crawl.FinishDamaged
			if ok && recheck {
				l.rechecked = start
			}
			if ok {
				// A pass that could not reach the relay leaves the last
				// finished pass's word standing.
				l.backfillComplete = res.Drained()
			}
		})
		if !ok {
			// Logged by the scheduler's summary, with the others.
			l.set(func(l *relayLoop) { l.state = StateWaiting })
			return sched.Outcome{OK: got, Err: res.Finish + ": " + res.Detail}
		}
		got = true
		if !l.cfg.Live || l.cfg.Until != 0 {
			l.set(func(l *relayLoop) { l.state = StateStopped })
			return sched.Outcome{OK: true, Done: true} // a bounded job is done
		}
		tail := l.ensureTail(ctx, start.Add(-time.Duration(l.cfg.TailOverlap)).Unix())
		l.set(func(l *relayLoop) { l.state = StateLive })
		select {
		case <-ctx.Done():
		case <-tail.stopped:
			if ctx.Err() == nil && tail.err != nil {
				l.log.Warn("live tail refused", zap.Error(tail.err))
				l.set(func(l *relayLoop) { l.state = StateWaiting })
				return sched.Outcome{OK: true, Err: "tail: " + tail.err.Error()}
			}
		case <-time.After(time.Duration(l.cfg.CatchupInterval)):
		}
	}
	return sched.Outcome{OK: got}
}

// liveTail is a relay's live tail, run by relayLoop.run beside its passes.
type liveTail struct {
	cancel  context.CancelFunc
	stopped chan struct{} // closed when the tail has returned
	err     error         // why it returned, set before stopped closes
}

// ensureTail returns the relay's live tail, started from since unless it
// runs.
func (l *relayLoop) ensureTail(ctx context.Context, since int64) *liveTail {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tail != nil {
		return l.tail
	}
	ctx, cancel := context.WithCancel(ctx)
	t := &liveTail{cancel: cancel, stopped: make(chan struct{})}
	l.tail = t
	go func() {
		defer close(t.stopped)
		c, err := l.crawler(false)
		if err == nil {
			err = c.Tail(ctx, l.cfg.URL, crawl.TailOptions{Since: since, Floor: int64(l.cfg.Since), Overlap: time.Duration(l.cfg.TailOverlap)})
		}
		if err == nil && ctx.Err() == nil {
			err = errors.New("stopped") // Tail returns nil only when ctx ends
		}
		t.err = err
	}()
	return t
}

// stopTail stops the live tail, if one runs, and waits for it. A tail
// stopped so ends with a nil err.
func (l *relayLoop) stopTail() {
	l.mu.Lock()
	t := l.tail
	l.tail = nil
	l.mu.Unlock()
	if t != nil {
		t.cancel()
		<-t.stopped
	}
}

// yieldTail is the crawl's OnConnLimit: the relay refused a pass's
// connection with HTTP 429. If the live tail holds one, it stops (the
// pass retries its connection), and from now on passes stop it while
// they run.
func (l *relayLoop) yieldTail() {
	l.mu.Lock()
	first := !l.tailYields && l.tail != nil
	l.tailYields = l.tailYields || l.tail != nil
	l.mu.Unlock()
	if first {
		l.log.Warn("the relay refused a connection while the live tail held one; passes stop the tail while they run")
	}
	l.stopTail()
}

// recheckDue reports whether a pass starting at now rechecks the relay's
// earlier ranges: the first of this process (the relay may have been sent
// backdated events while nothing tailed it) and then every
// recheck_interval.
func (l *relayLoop) recheckDue(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	every := time.Duration(l.cfg.RecheckInterval)
	return every > 0 && (l.rechecked.IsZero() || now.Sub(l.rechecked) >= every)
}

func (l *relayLoop) backfill(ctx context.Context, recheck bool) crawl.Result {
	c, err := l.crawler(recheck)
	if err != nil {
		return crawl.Result{Relay: l.cfg.URL, Finish: crawl.FinishGaveUp, Detail: err.Error()}
	}
	return c.Run(ctx, []string{l.cfg.URL})[0]
}

// crawler builds the crawl for this relay's job from the configuration.
func (l *relayLoop) crawler(recheck bool) (*crawl.Crawler, error) {
	o := l.d.crawlOptions()
	o.Recheck = recheck
	o.OnConnLimit = l.yieldTail
	o.Dialer = l.d.dialerFor(l.cfg.URL)
	o.Since, o.Until, o.Kinds, o.Authors = int64(l.cfg.Since), int64(l.cfg.Until), l.cfg.Kinds, l.cfg.Authors
	// Reading a relay's whole history back every catch-up interval would
	// cost more than the pass: once per process, and again after damage.
	l.mu.Lock()
	o.SkipReadBack = l.readBack && o.Store.Damage() == nil
	l.mu.Unlock()
	c, err := crawl.New(o)
	return c, err
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// RelayStatus is one relay's entry in /status.
type RelayStatus struct {
	// State is the loop's (backfill, live, waiting, stopped) while the
	// scheduler runs the relay, else the scheduler's (due, probing,
	// backoff).
	State            string `json:"state"`
	BackfillComplete bool   `json:"backfill_complete"`
	Passes           int    `json:"passes"`
	LastFinish       string `json:"last_finish,omitempty"`
	LastDetail       string `json:"last_detail,omitempty"`
	// The scheduler's record: consecutive failures, the last one's
	// reason, when the relay is dialed next, when a dial last got through.
	Failures  int    `json:"failures,omitempty"`
	LastError string `json:"last_error,omitempty"`
	NextDial  string `json:"next_dial,omitempty"`
	LastUp    string `json:"last_up,omitempty"`
	// Discovered says where discovery learned the relay; absent for a
	// configured one.
	Discovered *Discovered `json:"discovered,omitempty"`
}

func (l *relayLoop) status(s sched.Status) RelayStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := RelayStatus{State: l.state, BackfillComplete: l.backfillComplete, Passes: l.passes, LastFinish: l.last.Finish, LastDetail: l.last.Detail,
		Failures: s.Failures, LastError: s.LastErr, NextDial: unixMilli(s.Next), LastUp: unixMilli(s.LastOK), Discovered: l.found}
	if s.State != sched.StateActive && s.State != sched.StateDone && s.State != "" {
		st.State = s.State
	}
	return st
}

func unixMilli(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}
