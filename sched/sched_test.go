package sched

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestBackoff(t *testing.T) {
	p := Policy{BackoffMin: time.Minute, BackoffMax: 6 * time.Hour, Jitter: 0.2}
	for _, tc := range []struct {
		n    int
		u    float64
		want time.Duration
	}{
		{1, 0.5, time.Minute},
		{0, 0.5, time.Minute}, // never under the minimum
		{2, 0.5, 2 * time.Minute},
		{5, 0.5, 16 * time.Minute},
		{9, 0.5, 256 * time.Minute},
		{10, 0.5, 6 * time.Hour}, // capped
		{1000, 0.5, 6 * time.Hour},
		{1, 0, 48 * time.Second}, // jitter: 1 - 0.2
		{10, 0.999999, time.Duration(float64(6*time.Hour) * (1 + 0.2*(2*0.999999-1)))},
	} {
		if got := p.Backoff(tc.n, tc.u); got != tc.want {
			t.Errorf("Backoff(%d, %v) = %v, want %v", tc.n, tc.u, got, tc.want)
		}
	}
}

// sim is a fake world for the scheduler: relays are dead (the probe fails
// after dialTime), or live (the run holds the host for passTime, then
// tails quietly until stopped).
type sim struct {
	dialTime, passTime time.Duration
	dead               map[string]bool

	mu         sync.Mutex
	probes     map[string]int
	inFlight   int
	maxFlight  int
	hostBusy   map[string]int
	hostMax    int
	firstRun   map[string]time.Time
	persisted  map[string]Record
	probeTimes []time.Time
}

func newSim(dead map[string]bool) *sim {
	return &sim{dialTime: time.Second, passTime: 2 * time.Second, dead: dead, probes: map[string]int{},
		hostBusy: map[string]int{}, firstRun: map[string]time.Time{}, persisted: map[string]Record{}}
}

func hostOf(u string) string {
	p, _ := url.Parse(u)
	return p.Hostname()
}

func (s *sim) hold(host string, d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hostBusy[host] += d
	s.hostMax = max(s.hostMax, s.hostBusy[host])
}

func (s *sim) options(p Policy) Options {
	return Options{
		Policy: p,
		Host:   hostOf,
		Rand:   func() float64 { return 0.5 },
		Probe: func(ctx context.Context, u string) error {
			s.mu.Lock()
			s.probes[u]++
			s.inFlight++
			s.maxFlight = max(s.maxFlight, s.inFlight)
			s.probeTimes = append(s.probeTimes, time.Now())
			s.mu.Unlock()
			s.hold(hostOf(u), 1)
			defer s.hold(hostOf(u), -1)
			defer func() { s.mu.Lock(); s.inFlight--; s.mu.Unlock() }()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(s.dialTime):
			}
			if s.dead[u] {
				return errors.New("dial " + u + ": connect: connection refused")
			}
			return nil
		},
		Run: func(ctx context.Context, u string, l *Lease) Outcome {
			s.mu.Lock()
			if _, ok := s.firstRun[u]; !ok {
				s.firstRun[u] = time.Now()
			}
			s.mu.Unlock()
			s.hold(hostOf(u), 1)
			select {
			case <-ctx.Done():
			case <-time.After(s.passTime):
			}
			s.hold(hostOf(u), -1)
			l.Release()
			<-ctx.Done()
			return Outcome{OK: true}
		},
		Persist: func(u string, r Record) {
			s.mu.Lock()
			s.persisted[u] = r
			s.mu.Unlock()
		},
	}
}

// probed returns how many times u was probed.
func (s *sim) probed(u string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.probes[u]
}

func start(t *testing.T, o Options) (*Scheduler, func()) {
	s := New(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	return s, func() {
		cancel()
		<-done
	}
}

// With 2,000 dead relays configured before 2 live ones, the dial budget
// holds (never more than MaxDials probes at once, never faster than the
// rate) and the live relays run as soon as the budget reaches them: the
// dead cost one probe each, not retries in a loop.
func TestDialBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dead := map[string]bool{}
		var urls []string
		for i := range 2000 {
			u := fmt.Sprintf("wss://dead%d.example", i)
			dead[u] = true
			urls = append(urls, u)
		}
		urls = append(urls, "wss://live1.example", "wss://live2.example")
		w := newSim(dead)
		p := Policy{MaxDials: 16, DialsPerSecond: 100, BackoffMin: 10 * time.Minute, BackoffMax: 6 * time.Hour}
		s, stop := start(t, w.options(p))
		t0 := time.Now()
		for _, u := range urls {
			s.Add(u, Record{})
		}
		time.Sleep(200 * time.Second) // less than the first backoff: no dead relay is dialed twice
		synctest.Wait()
		stop()

		if w.maxFlight > p.MaxDials {
			t.Errorf("%d probes at once, budget %d", w.maxFlight, p.MaxDials)
		}
		// 16 in flight, 1 s each: 16 probes a second, under the rate.
		for _, u := range []string{"wss://live1.example", "wss://live2.example"} {
			at, ok := w.firstRun[u]
			if !ok {
				t.Fatalf("%s never ran", u)
			}
			// 2,002 probes at 16 per second: the last is reached by 126 s
			// at worst; it must not wait behind dead relays' retries.
			if d := at.Sub(t0); d > 130*time.Second {
				t.Errorf("%s ran after %v", u, d)
			}
		}
		if len(w.probes) != len(urls) {
			t.Errorf("%d of %d relays probed", len(w.probes), len(urls))
		}
		for u, n := range w.probes {
			if n != 1 {
				t.Errorf("%s probed %d times in 200 s", u, n)
			}
		}
	})
}

// The rate caps probes per second even when dials are instant.
func TestDialRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dead := map[string]bool{}
		for i := range 100 {
			dead[fmt.Sprintf("wss://r%d.example", i)] = true
		}
		w := newSim(dead)
		w.dialTime = 0
		p := Policy{MaxDials: 1000, DialsPerSecond: 10, BackoffMin: time.Hour, BackoffMax: time.Hour}
		s, stop := start(t, w.options(p))
		for u := range dead {
			s.Add(u, Record{})
		}
		time.Sleep(5*time.Second + time.Millisecond)
		synctest.Wait()
		stop()
		// a burst of one second's worth, then 10 a second
		if n := len(w.probeTimes); n != 10+50 {
			t.Errorf("%d probes in 5 s at 10/s (burst 10), want 60", n)
		}
	})
}

// One host serving many relay URLs sees one probe or backfill at a time;
// every URL still gets its turn once each releases the host for its tail.
func TestHostPoliteness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newSim(nil)
		s, stop := start(t, w.options(Policy{MaxDials: 8, DialsPerSecond: 100, BackoffMin: time.Minute, BackoffMax: time.Hour}))
		for i := range 5 {
			s.Add(fmt.Sprintf("wss://big.example/r%d", i), Record{})
		}
		s.Add("wss://other.example", Record{})
		time.Sleep(time.Minute)
		synctest.Wait()
		counts := s.Counts()
		stop()
		if w.hostMax != 1 {
			t.Errorf("host held by %d at once", w.hostMax)
		}
		if counts[StateActive] != 6 || len(w.firstRun) != 6 {
			t.Errorf("states %v, %d ran", counts, len(w.firstRun))
		}
		// other.example does not wait behind big.example's queue
		if d := w.firstRun["wss://other.example"].Sub(w.firstRun["wss://big.example/r0"]); d > time.Second {
			t.Errorf("other host ran %v after the first", d)
		}
	})
}

// A dead relay is retried on the backoff's schedule, not in a loop: over a
// day, minimum one minute, doubling to six hours.
func TestNoHotLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := "wss://dead.example"
		w := newSim(map[string]bool{u: true})
		w.dialTime = 0
		s, stop := start(t, w.options(Policy{MaxDials: 8, DialsPerSecond: 100, BackoffMin: time.Minute, BackoffMax: 6 * time.Hour}))
		s.Add(u, Record{})
		time.Sleep(24 * time.Hour)
		synctest.Wait()
		st := s.Statuses()
		stop()
		// 1+2+...+256 min = 8h31m for 10 probes, then every 6 h: 2 more.
		if w.probes[u] != 12 {
			t.Errorf("%d probes in 24 h, want 12", w.probes[u])
		}
		if len(st) != 1 || st[0].State != StateBackoff || st[0].Failures != 12 || st[0].LastErr == "" {
			t.Errorf("status %+v", st)
		}
		if w.persisted[u] != st[0].Record {
			t.Errorf("persisted %+v, status %+v", w.persisted[u], st[0].Record)
		}
		if f := s.TakeFailures(); f["connection refused"] != 12 || len(s.TakeFailures()) != 0 {
			t.Errorf("failure summary %v", f)
		}
	})
}

// A relay added with a persisted backoff (a restart) is not dialed before
// its time; a live relay with a good record goes first.
func TestRestartKeepsBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dead, live := "wss://dead.example", "wss://live.example"
		w := newSim(map[string]bool{dead: true})
		s, stop := start(t, w.options(Policy{MaxDials: 1, DialsPerSecond: 100, BackoffMin: time.Minute, BackoffMax: 6 * time.Hour}))
		now := time.Now()
		s.Add(dead, Record{Failures: 5, Next: now.Add(time.Hour).UnixMilli()})
		s.Add(live, Record{LastOK: now.Add(-time.Hour).UnixMilli()})
		time.Sleep(59 * time.Minute)
		synctest.Wait()
		if w.probed(dead) != 0 || w.probed(live) != 1 {
			t.Errorf("before the backoff ends: probes %d dead, %d live", w.probed(dead), w.probed(live))
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		stop()
		if w.probes[dead] != 1 || w.persisted[dead].Failures != 6 {
			t.Errorf("after: probes %v, record %+v", w.probes, w.persisted[dead])
		}
	})
}

// Among relays due at once, those that last got through are dialed first.
func TestGoodRelaysFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newSim(nil)
		s, stop := start(t, w.options(Policy{MaxDials: 1, DialsPerSecond: 100, BackoffMin: time.Minute, BackoffMax: time.Hour}))
		s.Add("wss://failing.example", Record{Failures: 3})
		s.Add("wss://unknown.example", Record{})
		s.Add("wss://good.example", Record{LastOK: 1})
		time.Sleep(10 * time.Second)
		synctest.Wait()
		stop()
		g, u, f := w.firstRun["wss://good.example"], w.firstRun["wss://unknown.example"], w.firstRun["wss://failing.example"]
		if !g.Before(u) || !u.Before(f) {
			t.Errorf("order: good %v, unknown %v, failing %v", g, u, f)
		}
	})
}

// A run that fails after getting through starts its backoff again at one
// failure; a bounded job that finishes is done and never dialed again;
// Remove stops a running relay.
func TestRunOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		out       Outcome
		state     string
		failures  int
		nextProbe bool // dialed again within the first backoff plus a minute
	}{
		{"failed after a pass", Outcome{OK: true, Err: "gave up"}, StateBackoff, 1, true},
		{"failed", Outcome{Err: "auth-required"}, StateBackoff, 4, false},
		{"done", Outcome{OK: true, Done: true}, StateDone, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newSim(nil)
				o := w.options(Policy{MaxDials: 1, DialsPerSecond: 100, BackoffMin: time.Minute, BackoffMax: time.Hour})
				o.Run = func(context.Context, string, *Lease) Outcome { return tc.out }
				s, stop := start(t, o)
				s.Add("wss://r.example", Record{Failures: 3})
				time.Sleep(2 * time.Second)
				synctest.Wait()
				st := s.Statuses()[0]
				if st.State != tc.state || st.Failures != tc.failures {
					t.Errorf("state %s failures %d, want %s %d", st.State, st.Failures, tc.state, tc.failures)
				}
				time.Sleep(2 * time.Minute)
				synctest.Wait()
				stop()
				if again := w.probes["wss://r.example"] > 1; again != tc.nextProbe {
					t.Errorf("probed %d times", w.probes["wss://r.example"])
				}
			})
		})
	}
}

func TestRemoveStopsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newSim(nil)
		stopped := make(chan struct{})
		o := w.options(Policy{MaxDials: 1, DialsPerSecond: 100, BackoffMin: time.Minute, BackoffMax: time.Hour})
		o.Run = func(ctx context.Context, _ string, _ *Lease) Outcome { <-ctx.Done(); close(stopped); return Outcome{} }
		s, stop := start(t, o)
		defer stop()
		s.Add("wss://r.example", Record{})
		time.Sleep(2 * time.Second)
		synctest.Wait()
		s.Remove("wss://r.example")
		synctest.Wait()
		select {
		case <-stopped:
		default:
			t.Fatal("run still going after Remove")
		}
		if len(s.Statuses()) != 0 {
			t.Errorf("statuses %v", s.Statuses())
		}
	})
}
