// Package sched decides when each of many relays is dialed: one goroutine
// keeps every relay that is not running in a heap ordered by the time it
// is due, probes due relays under a global dial budget (concurrent dials
// and dials per second) and one probe or heavy pass per host at a time,
// hands reachable relays to a runner, and backs off relays that fail,
// exponentially with jitter up to hours. A relay waiting in the heap costs
// one small struct: no goroutine, no connection.
//
// The package does no I/O of its own: probing, running and persisting are
// the caller's functions, so the policy runs in virtual time in tests.
package sched

import (
	"container/heap"
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"time"
)

// States of a relay.
const (
	StateDue     = "due"     // waiting for a dial slot (or its host)
	StateProbing = "probing" // one dial in flight
	StateActive  = "active"  // the runner has it
	StateBackoff = "backoff" // failed; not dialed again before Record.Next
	StateDone    = "done"    // the runner finished it for good (a bounded job)
)

// States lists every state, for metrics.
var States = []string{StateDue, StateProbing, StateActive, StateBackoff, StateDone}

// Record is what survives a restart for one relay: the caller persists it
// (Options.Persist) and gives it back to Add.
type Record struct {
	Failures int    `json:"failures,omitempty"` // consecutive failed dials or passes
	Next     int64  `json:"next,omitempty"`     // unix ms before which it is not dialed
	LastOK   int64  `json:"last_ok,omitempty"`  // unix ms of the last dial that got through
	LastTry  int64  `json:"last_try,omitempty"` // unix ms of the last dial
	LastErr  string `json:"last_err,omitempty"` // why the last failure failed
}

// Policy is the dial budget and the backoff.
type Policy struct {
	MaxDials       int           // probes in flight at once
	DialsPerSecond float64       // probes started per second (burst: one second's worth)
	BackoffMin     time.Duration // the first failure's pause
	BackoffMax     time.Duration // the cap (hours)
	Jitter         float64       // each pause is scaled by 1 ± Jitter, at random
}

// DefaultPolicy dials 64 relays at once, 50 a second, and backs off from
// one minute to six hours.
func DefaultPolicy() Policy {
	return Policy{MaxDials: 64, DialsPerSecond: 50, BackoffMin: time.Minute, BackoffMax: 6 * time.Hour, Jitter: 0.2}
}

// Backoff is the pause after the n-th consecutive failure (n >= 1); u in
// [0,1) draws the jitter.
func (p Policy) Backoff(n int, u float64) time.Duration {
	d := float64(p.BackoffMin) * math.Pow(2, float64(max(n, 1)-1))
	d = min(d, float64(p.BackoffMax))
	return time.Duration(d * (1 + p.Jitter*(2*u-1)))
}

// Outcome is how a run of the runner ended.
type Outcome struct {
	// OK: at least one pass got through (the failure count restarts).
	OK bool
	// Done: the relay needs no more runs (a bounded job finished).
	Done bool
	// Err, if set, is why the run ended: the relay backs off.
	Err string
}

// Lease is the politeness slot of a relay's host, which the runner holds
// through heavy work (a backfill pass) and may give up meanwhile (a quiet
// live tail), so that other relays on the host get their turn.
type Lease struct {
	s    *Scheduler
	host string
	held bool
}

// Release gives the host's slot up (a no-op when not held).
func (l *Lease) Release() {
	if !l.held {
		return
	}
	l.held = false
	l.s.mu.Lock()
	l.s.releaseHostLocked(l.host)
	l.s.mu.Unlock()
	l.s.poke()
}

// Acquire waits for the host's slot.
func (l *Lease) Acquire(ctx context.Context) error {
	for !l.held {
		l.s.mu.Lock()
		ch, busy := l.s.hosts[l.host]
		if !busy {
			l.s.hosts[l.host] = make(chan struct{})
			l.held = true
		}
		l.s.mu.Unlock()
		if busy {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-ch:
			}
		}
	}
	return nil
}

// Options configure a Scheduler.
type Options struct {
	Policy
	// Probe dials url once; nil means reachable.
	Probe func(ctx context.Context, url string) error
	// Run runs a reachable relay until it fails or is done, holding the
	// host's lease on entry. It runs in its own goroutine.
	Run func(ctx context.Context, url string, lease *Lease) Outcome
	// Persist receives each relay's record when it changes. It is called
	// with the scheduler's lock held and must not block.
	Persist func(url string, r Record)
	// Host names the politeness group of url (its host name).
	Host func(url string) string
	Now  func() time.Time // default time.Now
	Rand func() float64   // default rand.Float64
}

type entry struct {
	url, host string
	state     string
	rec       Record
	due       time.Time
	index     int // in the heap, -1 when not in it
	cancel    context.CancelFunc
}

// Scheduler runs the relays added to it. Its methods are safe for
// concurrent use.
type Scheduler struct {
	o    Options
	wake chan struct{}

	mu       sync.Mutex
	relays   map[string]*entry
	queue    queue
	parked   map[string][]*entry      // due relays whose host is busy
	hosts    map[string]chan struct{} // busy hosts; closed when freed
	probing  int
	tokens   float64
	refilled time.Time
	failures map[string]int // failures since the last TakeFailures, by reason
	ctx      context.Context
	wg       sync.WaitGroup // probes and runs
}

// New returns a Scheduler; Run starts it.
func New(o Options) *Scheduler {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.Persist == nil {
		o.Persist = func(string, Record) {}
	}
	o.MaxDials = max(o.MaxDials, 1)
	if o.DialsPerSecond <= 0 {
		o.DialsPerSecond = math.Inf(1)
	}
	return &Scheduler{o: o, wake: make(chan struct{}, 1), relays: map[string]*entry{},
		parked: map[string][]*entry{}, hosts: map[string]chan struct{}{}, failures: map[string]int{}}
}

// Add schedules url with its persisted record (the zero Record for a new
// relay): it is dialed once rec.Next has passed. Adding a known url does
// nothing.
func (s *Scheduler) Add(url string, rec Record) {
	s.mu.Lock()
	if _, ok := s.relays[url]; !ok {
		e := &entry{url: url, host: s.o.Host(url), rec: rec, index: -1}
		s.relays[url] = e
		s.enqueueLocked(e, time.UnixMilli(rec.Next))
	}
	s.mu.Unlock()
	s.poke()
}

// Remove forgets url, stopping its run if it has one.
func (s *Scheduler) Remove(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.relays[url]
	if !ok {
		return
	}
	delete(s.relays, url)
	if e.index >= 0 {
		heap.Remove(&s.queue, e.index)
	}
	s.parked[e.host] = deleteEntry(s.parked[e.host], e)
	if e.cancel != nil {
		e.cancel()
	}
}

func deleteEntry(es []*entry, e *entry) []*entry {
	for i, x := range es {
		if x == e {
			return append(es[:i], es[i+1:]...)
		}
	}
	return es
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Scheduler) enqueueLocked(e *entry, due time.Time) {
	e.due = due
	if due.After(s.o.Now()) {
		e.state = StateBackoff
	} else {
		e.state = StateDue
	}
	heap.Push(&s.queue, e)
}

// Run dispatches until ctx ends, then cancels every run and returns when
// every probe and run it started has returned.
func (s *Scheduler) Run(ctx context.Context) {
	s.mu.Lock()
	s.ctx = ctx
	s.mu.Unlock()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s.mu.Lock()
		wait := s.dispatchLocked(ctx)
		s.mu.Unlock()
		t.Reset(wait)
		select {
		case <-ctx.Done():
			s.wg.Wait()
			return
		case <-s.wake:
		case <-t.C:
		}
	}
}

// idle is how long the loop sleeps with nothing due: a wake-up (Add, a
// probe or run ending) comes sooner.
const idle = time.Hour

// dispatchLocked starts the probes that are due and allowed, and returns
// how long until the next may be.
func (s *Scheduler) dispatchLocked(ctx context.Context) time.Duration {
	now := s.o.Now()
	s.refillLocked(now)
	for s.queue.Len() > 0 {
		e := s.queue[0]
		if e.due.After(now) {
			return e.due.Sub(now)
		}
		if e.state == StateBackoff {
			e.state = StateDue
		}
		if s.probing >= s.o.MaxDials {
			return idle // a probe's end wakes the loop
		}
		if s.tokens < 1 {
			return time.Duration((1 - s.tokens) / s.o.DialsPerSecond * float64(time.Second))
		}
		heap.Pop(&s.queue)
		if _, busy := s.hosts[e.host]; busy {
			s.parked[e.host] = append(s.parked[e.host], e)
			continue
		}
		s.tokens--
		s.startProbeLocked(ctx, e)
	}
	return idle
}

func (s *Scheduler) refillLocked(now time.Time) {
	burst := max(1, s.o.DialsPerSecond)
	if s.refilled.IsZero() {
		s.tokens = burst
	} else {
		s.tokens = min(burst, s.tokens+now.Sub(s.refilled).Seconds()*s.o.DialsPerSecond)
	}
	s.refilled = now
}

func (s *Scheduler) startProbeLocked(ctx context.Context, e *entry) {
	s.hosts[e.host] = make(chan struct{})
	s.probing++
	e.state = StateProbing
	e.rec.LastTry = s.o.Now().UnixMilli()
	rctx, cancel := context.WithCancel(ctx)
	e.cancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := s.o.Probe(rctx, e.url)
		s.mu.Lock()
		s.probing--
		if err == nil && rctx.Err() == nil && s.relays[e.url] == e {
			e.state = StateActive
			e.rec.LastOK, e.rec.Next = s.o.Now().UnixMilli(), 0
			s.o.Persist(e.url, e.rec)
			s.wg.Add(1)
			go s.run(rctx, cancel, e)
			s.mu.Unlock()
			s.poke()
			return
		}
		stopped := rctx.Err() != nil // removed or stopping: not the relay's failure
		cancel()
		s.releaseHostLocked(e.host)
		if !stopped {
			s.failLocked(e, err.Error(), false)
		}
		s.mu.Unlock()
		s.poke()
	}()
}

func (s *Scheduler) run(ctx context.Context, cancel context.CancelFunc, e *entry) {
	defer s.wg.Done()
	defer cancel()
	lease := &Lease{s: s, host: e.host, held: true}
	out := s.o.Run(ctx, e.url, lease)
	lease.Release()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.poke()
	e.cancel = nil
	if s.relays[e.url] != e || ctx.Err() != nil {
		return // removed or stopping: the record stays as it was
	}
	switch {
	case out.Err != "":
		s.failLocked(e, out.Err, out.OK)
	case out.Done:
		e.state = StateDone
		e.rec.Failures, e.rec.LastErr = 0, ""
		s.o.Persist(e.url, e.rec)
	default: // ended without a failure (it should not): dial again soon
		e.rec.Failures = 0
		s.enqueueLocked(e, s.o.Now())
	}
}

// failLocked backs e off after a failure (the count restarts at one when
// the run got something through first) and counts the reason.
func (s *Scheduler) failLocked(e *entry, reason string, reset bool) {
	if reset {
		e.rec.Failures = 0
	}
	e.rec.Failures++
	e.rec.LastErr = reason
	next := s.o.Now().Add(s.o.Backoff(e.rec.Failures, s.o.Rand()))
	e.rec.Next = next.UnixMilli()
	s.o.Persist(e.url, e.rec)
	s.failures[reasonClass(reason)]++
	s.enqueueLocked(e, next)
}

func (s *Scheduler) releaseHostLocked(host string) {
	if ch, ok := s.hosts[host]; ok {
		close(ch)
		delete(s.hosts, host)
	}
	// The host's parked relays are due: back to the heap, where the
	// budget decides.
	for _, e := range s.parked[host] {
		heap.Push(&s.queue, e)
	}
	delete(s.parked, host)
}

// Status is one relay's scheduling state.
type Status struct {
	URL   string `json:"url"`
	State string `json:"state"`
	Record
}

// Statuses lists every relay's state, by URL.
func (s *Scheduler) Statuses() []Status {
	s.mu.Lock()
	out := make([]Status, 0, len(s.relays))
	for _, e := range s.relays {
		out = append(out, Status{URL: e.url, State: e.state, Record: e.rec})
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].URL < out[j].URL })
	return out
}

// Counts returns how many relays are in each state.
func (s *Scheduler) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(States))
	now := s.o.Now()
	for _, e := range s.relays {
		st := e.state
		if st == StateBackoff && !e.due.After(now) {
			st = StateDue
		}
		out[st]++
	}
	return out
}

// TakeFailures returns the failures since the last call, by reason, and
// restarts the count: the caller logs one summary per interval instead of
// a line per dial.
func (s *Scheduler) TakeFailures() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.failures
	s.failures = map[string]int{}
	return out
}

// reasonClass cuts a failure's text to a short class for the summary: the
// text after the last ": " (a wrapped error's cause), capped.
func reasonClass(reason string) string {
	for i := len(reason) - 2; i >= 0; i-- {
		if reason[i] == ':' && reason[i+1] == ' ' {
			reason = reason[i+2:]
			break
		}
	}
	if len(reason) > 60 {
		reason = reason[:60]
	}
	return reason
}

// queue is a min-heap of entries by due time.
type queue []*entry

func (q queue) Len() int { return len(q) }

// Less orders by due time; among relays due at once (a start), those
// that got through last time go first, so that on a restart the live
// relays are dialed before the unknown and the failing.
func (q queue) Less(i, j int) bool {
	a, b := q[i], q[j]
	if !a.due.Equal(b.due) {
		return a.due.Before(b.due)
	}
	if a.rec.Failures != b.rec.Failures {
		return a.rec.Failures < b.rec.Failures
	}
	return a.rec.LastOK > b.rec.LastOK
}
func (q queue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *queue) Push(x any) {
	e := x.(*entry)
	e.index = len(*q)
	*q = append(*q, e)
}
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*q = old[:len(old)-1]
	return e
}
