package adaptive

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// simRelay models the limits real relays show (see the seeds): a page takes
// a fixed latency, stretched when a connection serves more pages than its
// cadence allows or when the relay as a whole is past its capacity; rate
// limits, per-IP connection caps and per-connection subscription caps
// refuse.
type simRelay struct {
	latency    time.Duration // page latency when nothing is saturated
	pageEvents int
	perConn    int     // pages one connection serves at full speed (0: no limit)
	capacity   float64 // events/s for the whole relay (0: no limit)
	rateLimit  int     // accepted REQs per second from our IP (0: none) -> CLOSED rate-limited
	rateEnd    time.Duration
	maxConns   int     // connections from our IP (0: none) -> HTTP 429
	subCap     int     // concurrent REQs per connection (0: none) -> NOTICE only
	jitter     float64 // each page's latency is scaled by a factor in [1-jitter, 1+jitter]
}

const (
	connectDelay = 300 * time.Millisecond
	refuseDelay  = 20 * time.Millisecond // a refusal arrives quickly
	retryDelay   = time.Second           // a refused connection waits before its next REQ
	reconnect    = 5 * time.Second       // after a 429
)

type simConn struct {
	up, closing      bool
	inflight, active int // crawler-side REQs out; relay-side pages being served
	pausedUntil      time.Duration
}

type evKind uint8

const (
	evUp evKind = iota
	ev429
	evPage
	evRefused
	evWake
)

type simEvent struct {
	at      time.Duration
	seq     int
	kind    evKind
	conn    *simConn
	latency time.Duration
	refusal Refusal
}

type evHeap []simEvent

func (h evHeap) Len() int { return len(h) }
func (h evHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h evHeap) Swap(i, j int)   { h[i], h[j] = h[j], h[i] }
func (h *evHeap) Push(x any)     { *h = append(*h, x.(simEvent)) }
func (h *evHeap) Pop() (x any)   { old := *h; x = old[len(old)-1]; *h = old[:len(old)-1]; return x }
func (h *evHeap) add(e simEvent) { heap.Push(h, e) }

// sim is a crawler driving one Controller against one simRelay in virtual
// time: it keeps the target's connections open and its REQs in flight.
type sim struct {
	t       *testing.T
	rng     *rand.Rand
	relay   simRelay
	cfg     Config
	ctl     *Controller
	epoch   time.Time
	now     time.Duration
	q       evHeap
	seq     int
	conns   []*simConn
	retryAt time.Duration // no new connection before this (after a 429)
	active  int           // pages the relay is serving

	window   []time.Duration // accepted REQs in the last second, for the rate limit
	pages    []stamp         // page completions
	attempts []time.Duration // every REQ sent
	refused  []stamp         // refusals (n = kind)
	targets  []target        // target over time
	changes  []Change
}

type stamp struct {
	at time.Duration
	n  int
}

type target struct {
	at       time.Duration
	conns, r int
}

func newSim(t *testing.T, relay simRelay, cfg Config) *sim {
	s := &sim{t: t, relay: relay, epoch: time.Unix(1_700_000_000, 0), rng: rand.New(rand.NewPCG(1, 2))}
	cfg.OnChange = func(c Change) {
		s.changes = append(s.changes, c)
		s.targets = append(s.targets, target{s.now, c.Conns, c.Inflight})
	}
	s.cfg = cfg
	var err error
	if s.ctl, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	c, r := s.ctl.Target()
	s.targets = append(s.targets, target{0, c, r})
	return s
}

func (s *sim) at() time.Time { return s.epoch.Add(s.now) }

func (s *sim) schedule(e simEvent) {
	s.seq++
	e.seq = s.seq
	s.q.add(e)
}

func (s *sim) run(until time.Duration) {
	s.reconcile()
	for s.q.Len() > 0 && s.q[0].at <= until {
		e := heap.Pop(&s.q).(simEvent)
		s.now = e.at
		s.handle(e)
		s.reconcile()
	}
	s.now = until
}

func (s *sim) handle(e simEvent) {
	switch e.kind {
	case evUp:
		e.conn.up = true
	case ev429:
		s.remove(e.conn)
		s.ctl.Refused(s.at(), HTTP429)
		s.refused = append(s.refused, stamp{s.now, int(HTTP429)})
		s.retryAt = s.now + reconnect
		s.schedule(simEvent{at: s.retryAt, kind: evWake})
	case evPage:
		e.conn.inflight--
		e.conn.active--
		s.active--
		s.pages = append(s.pages, stamp{s.now, s.relay.pageEvents})
		s.ctl.PageDone(s.at(), s.relay.pageEvents, s.relay.pageEvents*400, e.latency)
		s.ctl.PageSize(s.relay.pageEvents)
	case evRefused:
		e.conn.inflight--
		s.ctl.Refused(s.at(), e.refusal)
		s.refused = append(s.refused, stamp{s.now, int(e.refusal)})
		e.conn.pausedUntil = s.now + retryDelay
		s.schedule(simEvent{at: e.conn.pausedUntil, kind: evWake})
	}
	if e.conn != nil && e.conn.closing && e.conn.inflight == 0 {
		s.remove(e.conn)
	}
}

func (s *sim) remove(c *simConn) {
	for i, x := range s.conns {
		if x == c {
			s.conns = append(s.conns[:i], s.conns[i+1:]...)
			return
		}
	}
}

// reconcile moves the crawler toward the controller's target.
func (s *sim) reconcile() {
	tc, tr := s.ctl.Target()
	capR := s.cfg.MaxInflightPerConn
	if s.cfg.MaxSubscriptions > 0 {
		capR = min(capR, s.cfg.MaxSubscriptions)
	}
	if tc < 1 || tr < 1 || tc > s.cfg.MaxConns || tr > capR {
		s.t.Fatalf("at %v target %dx%d outside 1..%d x 1..%d", s.now, tc, tr, s.cfg.MaxConns, capR)
	}
	var live []*simConn
	for _, c := range s.conns {
		if !c.closing {
			live = append(live, c)
		}
	}
	for len(live) > tc { // close the newest first, once their pages are in
		c := live[len(live)-1]
		live = live[:len(live)-1]
		c.closing = true
		if c.inflight == 0 {
			s.remove(c)
		}
	}
	for len(live) < tc && s.now >= s.retryAt {
		c := &simConn{}
		live = append(live, c)
		if s.relay.maxConns > 0 && len(s.conns) >= s.relay.maxConns {
			s.conns = append(s.conns, c) // until the 429 arrives
			s.schedule(simEvent{at: s.now + connectDelay, kind: ev429, conn: c})
			continue
		}
		s.conns = append(s.conns, c)
		s.schedule(simEvent{at: s.now + connectDelay, kind: evUp, conn: c})
	}
	for _, c := range live {
		for c.up && s.now >= c.pausedUntil && c.inflight < tr {
			s.send(c)
		}
	}
}

// send is one REQ: the relay refuses it or schedules its EOSE.
func (s *sim) send(c *simConn) {
	c.inflight++
	s.attempts = append(s.attempts, s.now)
	refuse := func(kind Refusal) {
		s.schedule(simEvent{at: s.now + refuseDelay, kind: evRefused, conn: c, refusal: kind})
	}
	if s.relay.subCap > 0 && c.active >= s.relay.subCap {
		refuse(TooManyREQs)
		return
	}
	if s.relay.rateLimit > 0 && (s.relay.rateEnd == 0 || s.now < s.relay.rateEnd) {
		for len(s.window) > 0 && s.window[0] <= s.now-time.Second {
			s.window = s.window[1:]
		}
		if len(s.window) >= s.relay.rateLimit {
			refuse(RateLimited)
			return
		}
		s.window = append(s.window, s.now)
	}
	c.active++
	s.active++
	stretch := 1.0
	if s.relay.perConn > 0 {
		stretch = max(stretch, float64(c.active)/float64(s.relay.perConn))
	}
	if s.relay.capacity > 0 {
		demand := float64(s.active*s.relay.pageEvents) / s.relay.latency.Seconds()
		stretch = max(stretch, demand/s.relay.capacity)
	}
	if s.relay.jitter > 0 {
		stretch *= 1 + s.relay.jitter*(2*s.rng.Float64()-1)
	}
	lat := time.Duration(float64(s.relay.latency) * stretch)
	s.schedule(simEvent{at: s.now + lat, kind: evPage, conn: c, latency: lat})
}

// throughput is events/s served in (from, to].
func (s *sim) throughput(from, to time.Duration) float64 {
	var n int
	for _, p := range s.pages {
		if p.at > from && p.at <= to {
			n += p.n
		}
	}
	return float64(n) / (to - from).Seconds()
}

func count[T any](xs []T, at func(T) time.Duration, from, to time.Duration) int {
	n := 0
	for _, x := range xs {
		if t := at(x); t > from && t <= to {
			n++
		}
	}
	return n
}

// timeWhere is the share of (from, to] during which f(target) held.
func (s *sim) timeWhere(from, to time.Duration, f func(target) bool) float64 {
	var in time.Duration
	for i, tg := range s.targets {
		end := to
		if i+1 < len(s.targets) {
			end = s.targets[i+1].at
		}
		lo, hi := max(tg.at, from), min(end, to)
		if hi > lo && f(tg) {
			in += hi - lo
		}
	}
	return float64(in) / float64(to-from)
}

func (s *sim) logChanges() {
	for _, c := range s.changes {
		s.t.Logf("%8v %v", c.At.Sub(s.epoch).Round(time.Millisecond), c)
	}
}

func TestSimPerConnectionCadence(t *testing.T) {
	// One connection serves two pages at a time (5 000 events/s); the relay
	// 20 000 events/s in all: only more connections help.
	for _, jitter := range []float64{0, 0.3} {
		t.Run(fmt.Sprintf("jitter %.1f", jitter), func(t *testing.T) {
			relay := simRelay{latency: 200 * time.Millisecond, pageEvents: 500, perConn: 2, capacity: 20000, jitter: jitter}
			s := newSim(t, relay, DefaultConfig())
			s.run(3 * time.Minute)
			got := s.throughput(time.Minute, 3*time.Minute)
			conns, r := s.ctl.Target()
			t.Logf("final %dx%d, %.0f events/s over the last 2 min (capacity %.0f), %d changes", conns, r, got, relay.capacity, len(s.changes))
			if got < 0.9*relay.capacity {
				s.logChanges()
				t.Fatalf("throughput %.0f events/s < 90%% of %.0f", got, relay.capacity)
			}
			if conns < 3 {
				t.Fatalf("settled at %d connections, want several", conns)
			}
			if len(s.refused) != 0 {
				t.Fatalf("%d refusals from a relay that refuses nothing", len(s.refused))
			}
		})
	}
}

func TestSimRateLimit(t *testing.T) {
	// 22 REQs/s at 200 ms per page: at most 4 REQs in flight stay under it.
	relay := simRelay{latency: 200 * time.Millisecond, pageEvents: 500, rateLimit: 22}
	s := newSim(t, relay, DefaultConfig())
	end := 10 * time.Minute
	s.run(end)
	settled := time.Minute
	attempts := count(s.attempts, func(d time.Duration) time.Duration { return d }, settled, end)
	refused := count(s.refused, func(x stamp) time.Duration { return x.at }, settled, end)
	decreases := 0
	for _, c := range s.changes {
		if c.Reason == ReasonRefusal && c.At.Sub(s.epoch) > settled {
			decreases++
		}
	}
	rate := float64(attempts) / (end - settled).Seconds()
	got := s.throughput(settled, end)
	limitRate := float64(relay.rateLimit * relay.pageEvents)
	t.Logf("after %v: %.1f REQs/s (limit %d), %d of %d refused, %d decreases, %.0f events/s (%.0f%% of what the limit allows)",
		settled, rate, relay.rateLimit, refused, attempts, decreases, got, 100*got/limitRate)
	if rate > float64(relay.rateLimit) {
		t.Errorf("sends %.1f REQs/s, over the limit", rate)
	}
	if float64(refused) > 0.01*float64(attempts) {
		t.Errorf("%d of %d REQs refused after settling", refused, attempts)
	}
	if decreases > 6 {
		t.Errorf("%d decreases after settling", decreases)
	}
	if got < 0.6*limitRate {
		t.Errorf("throughput %.0f events/s, under 60%% of the %.0f the limit allows", got, limitRate)
	}
	if t.Failed() {
		s.logChanges()
	}
}

func TestSimSubscriptionCap(t *testing.T) {
	relay := simRelay{latency: 200 * time.Millisecond, pageEvents: 500, subCap: 3}
	cfg := DefaultConfig()
	cfg.MaxConns = 2 // make it grow REQs per connection
	s := newSim(t, relay, cfg)
	end := 5 * time.Minute
	s.run(end)
	first := end
	if len(s.refused) > 0 {
		first = s.refused[0].at
	}
	over := s.timeWhere(first, end, func(tg target) bool { return tg.r > 3 })
	maxR := 0
	for _, tg := range s.targets {
		maxR = max(maxR, tg.r)
	}
	conns, r := s.ctl.Target()
	t.Logf("first refusal at %v, %.2f%% of the time above 3 after it, max %d, final %dx%d", first, 100*over, maxR, conns, r)
	if first == end {
		t.Fatal("never reached the cap")
	}
	if over > 0.02 {
		s.logChanges()
		t.Fatalf("above the cap %.1f%% of the time after learning it", 100*over)
	}
	if maxR > 4 || r != 3 || conns != 2 {
		s.logChanges()
		t.Fatalf("max %d REQs per connection, final %dx%d; want at most one probe step over 3, ending at 2x3", maxR, conns, r)
	}
}

func TestSimConnectionCap(t *testing.T) {
	relay := simRelay{latency: 200 * time.Millisecond, pageEvents: 500, perConn: 2, maxConns: 3}
	s := newSim(t, relay, DefaultConfig())
	end := 5 * time.Minute
	s.run(end)
	first := end
	for _, r := range s.refused {
		if r.n == int(HTTP429) {
			first = r.at
			break
		}
	}
	over := s.timeWhere(first, end, func(tg target) bool { return tg.conns > 3 })
	conns, r := s.ctl.Target()
	t.Logf("first 429 at %v, %.2f%% of the time above 3 connections after it, final %dx%d", first, 100*over, conns, r)
	if first == end || over > 0.02 || conns != 3 {
		s.logChanges()
		t.Fatalf("want the connection cap learned and held at 3")
	}
}

func TestSimProbesAfterLimitLifts(t *testing.T) {
	relay := simRelay{latency: 200 * time.Millisecond, pageEvents: 500, rateLimit: 22, rateEnd: 2 * time.Minute, capacity: 40000}
	s := newSim(t, relay, DefaultConfig())
	s.run(relay.rateEnd)
	limited := s.throughput(time.Minute, relay.rateEnd)
	end := 12 * time.Minute
	s.run(end)
	free := s.throughput(end-2*time.Minute, end)
	conns, r := s.ctl.Target()
	t.Logf("%.0f events/s under the limit, %.0f after it lifted (capacity %.0f), final %dx%d", limited, free, relay.capacity, conns, r)
	if limited > float64(relay.rateLimit*relay.pageEvents) {
		t.Fatalf("%.0f events/s while limited: more than the limit allows", limited)
	}
	if free < 0.8*relay.capacity {
		s.logChanges()
		t.Fatalf("after the limit lifted: %.0f events/s, want >= 80%% of %.0f", free, relay.capacity)
	}
}

func TestSimNeverExceedsCaps(t *testing.T) {
	// A relay with no limits: the controller must climb to the caps and stop.
	relay := simRelay{latency: 100 * time.Millisecond, pageEvents: 500}
	tests := []struct {
		maxConns, maxInflight, maxSubs int
		wantC, wantR                   int
	}{
		{3, 4, 0, 3, 4},
		{8, 16, 5, 8, 5},
		{2, 16, 1, 2, 1},
		{1, 1, 0, 1, 1},
	}
	for _, tc := range tests {
		cfg := DefaultConfig()
		cfg.MaxConns, cfg.MaxInflightPerConn, cfg.MaxSubscriptions = tc.maxConns, tc.maxInflight, tc.maxSubs
		s := newSim(t, relay, cfg) // reconcile fails the test on any target past the caps
		s.run(3 * time.Minute)
		if c, r := s.ctl.Target(); c != tc.wantC || r != tc.wantR {
			s.logChanges()
			t.Errorf("caps %dx%d subs %d: settled at %dx%d, want %dx%d", tc.maxConns, tc.maxInflight, tc.maxSubs, c, r, tc.wantC, tc.wantR)
		}
	}
}

func TestSimSlowStartFindsCapacityQuickly(t *testing.T) {
	// 80 000 events/s need 32 pages in flight at 200 ms each; additive
	// steps of one, 2 s or more apiece, would take most of a minute.
	relay := simRelay{latency: 200 * time.Millisecond, pageEvents: 500, perConn: 8, capacity: 80000}
	s := newSim(t, relay, DefaultConfig())
	end := 2 * time.Minute
	s.run(end)
	reached := end
	for at := time.Duration(0); at+5*time.Second <= end; at += time.Second {
		if s.throughput(at, at+5*time.Second) >= 0.8*relay.capacity {
			reached = at + 5*time.Second
			break
		}
	}
	conns, r := s.ctl.Target()
	t.Logf("80%% of capacity by %v; final %dx%d, %.0f events/s over the last minute", reached, conns, r, s.throughput(end-time.Minute, end))
	if reached > 10*time.Second {
		s.logChanges()
		t.Fatalf("took %v to reach 80%% of capacity, want <= 10s (additive steps alone take 20s)", reached)
	}
	if got := s.throughput(end-time.Minute, end); got < 0.9*relay.capacity {
		s.logChanges()
		t.Fatalf("settled at %.0f events/s, want >= 90%% of %.0f", got, relay.capacity)
	}
}
