package adaptive

import (
	"errors"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	tests := []struct {
		name string
		edit func(*Config)
	}{
		{"negative max_subscriptions", func(c *Config) { c.MaxSubscriptions = -1 }},
		{"negative max_limit", func(c *Config) { c.MaxLimit = -1 }},
		{"zero conns", func(c *Config) { c.MaxConns = 0 }},
		{"zero inflight", func(c *Config) { c.MaxInflightPerConn = 0 }},
		{"zero start conns", func(c *Config) { c.StartConns = 0 }},
		{"zero start inflight", func(c *Config) { c.StartInflightPerConn = 0 }},
		{"zero page limit", func(c *Config) { c.PageLimit = 0 }},
		{"zero clamp evidence", func(c *Config) { c.ClampEvidence = 0 }},
		{"zero rounds", func(c *Config) { c.EpochRounds = 0 }},
		{"zero epoch", func(c *Config) { c.MinEpoch = 0 }},
		{"gain above 1", func(c *Config) { c.GainFraction = 1.5 }},
		{"latency factor 1", func(c *Config) { c.LatencyFactor = 1 }},
		{"backoff 1", func(c *Config) { c.Backoff = 1 }},
		{"backoff 0", func(c *Config) { c.Backoff = 0 }},
		{"negative hold", func(c *Config) { c.RefusalHold = -time.Second }},
		{"zero quiet", func(c *Config) { c.QuietPeriod = 0 }},
		{"max quiet below quiet", func(c *Config) { c.MaxQuietPeriod = time.Second }},
		{"negative history", func(c *Config) { c.History = -1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.edit(&cfg)
			if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
				t.Fatalf("Validate = %v, want ErrConfig", err)
			}
			if _, err := New(cfg); !errors.Is(err, ErrConfig) {
				t.Fatalf("New = %v, want ErrConfig", err)
			}
		})
	}
}

func mustNew(t *testing.T, edit func(*Config)) *Controller {
	t.Helper()
	cfg := DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPriorsClampStart(t *testing.T) {
	c := mustNew(t, func(c *Config) {
		c.MaxSubscriptions, c.MaxLimit = 1, 500
		c.StartConns, c.MaxConns = 4, 2
	})
	if conns, r := c.Target(); conns != 2 || r != 1 {
		t.Fatalf("start %dx%d, want 2x1", conns, r)
	}
	if n := c.EffectivePageLimit(); n != 500 {
		t.Fatalf("page limit %d, want NIP-11 max_limit 500", n)
	}
}

func TestRefusalsWithinHoldDecreaseOnce(t *testing.T) {
	c := mustNew(t, func(c *Config) { c.StartConns, c.StartInflightPerConn = 4, 8 })
	for i := range 10 { // a burst of refused REQs from one overload
		c.Refused(t0.Add(time.Duration(i)*100*time.Millisecond), RateLimited)
	}
	if conns, r := c.Target(); conns != 4 || r != 4 {
		t.Fatalf("after a burst: %dx%d, want 4x4", conns, r)
	}
	if n := len(c.Changes()); n != 1 {
		t.Fatalf("%d changes, want 1", n)
	}
	if st := c.State(); st.CeilInflight != 31 || st.Refusals[RateLimited] != 10 {
		t.Fatalf("state %+v", st)
	}
	c.Refused(t0.Add(10*time.Second), RateLimited) // a new overload
	if conns, r := c.Target(); conns != 4 || r != 2 {
		t.Fatalf("after the hold: %dx%d, want 4x2", conns, r)
	}
	if st := c.State(); st.CeilInflight != 15 {
		t.Fatalf("ceiling %d, want 15", st.CeilInflight)
	}
}

func TestRefusalKinds(t *testing.T) {
	tests := []struct {
		kind         Refusal
		wantC, wantR int
		ceil         func(State) int
		wantCeil     int
	}{
		{TooManyREQs, 4, 3, func(s State) int { return s.CeilInflightPerConn }, 5},
		{HTTP429, 2, 6, func(s State) int { return s.CeilConns }, 3},
		{RateLimited, 4, 3, func(s State) int { return s.CeilInflight }, 23},
		{Dropped, 4, 3, nil, 0},
		{Timeout, 4, 3, nil, 0},
		{ClosedError, 4, 3, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.kind.String(), func(t *testing.T) {
			c := mustNew(t, func(c *Config) { c.StartConns, c.StartInflightPerConn = 4, 6 })
			c.Refused(t0, tc.kind)
			if conns, r := c.Target(); conns != tc.wantC || r != tc.wantR {
				t.Fatalf("%dx%d, want %dx%d", conns, r, tc.wantC, tc.wantR)
			}
			ch := c.Changes()
			if len(ch) != 1 || ch[0].Reason != ReasonRefusal || ch[0].Refusal != tc.kind {
				t.Fatalf("changes %v", ch)
			}
			if tc.ceil != nil {
				if got := tc.ceil(c.State()); got != tc.wantCeil {
					t.Fatalf("ceiling %d, want %d", got, tc.wantCeil)
				}
			}
		})
	}
}

func TestFloorIsOneByOne(t *testing.T) {
	c := mustNew(t, func(c *Config) { c.StartConns, c.StartInflightPerConn = 3, 3 })
	for i := range 20 {
		c.Refused(t0.Add(time.Duration(i)*time.Minute), Refusal(1+i%int(Timeout)))
	}
	if conns, r := c.Target(); conns != 1 || r != 1 {
		t.Fatalf("%dx%d, want the 1x1 floor", conns, r)
	}
	st := c.State()
	if st.CeilConns != 1 || st.CeilInflightPerConn != 1 || st.CeilInflight != 1 {
		t.Fatalf("ceilings %+v", st)
	}
}

func TestHoldsUnderLearnedCeiling(t *testing.T) {
	// A sub cap learned at 4 keeps a single connection at 3 until the
	// quiet period ends, then the controller probes one step over it.
	c := mustNew(t, func(c *Config) { c.MaxConns, c.StartInflightPerConn = 1, 4 })
	start := t0
	now := t0
	c.Refused(now, TooManyREQs) // 1x4 -> 1x2, ceiling 3
	// A relay with no other limit: r pages complete every 100 ms.
	tick := func() {
		_, r := c.Target()
		for range r {
			c.PageDone(now, 500, 200_000, 100*time.Millisecond)
		}
		now = now.Add(100 * time.Millisecond)
	}
	for now.Sub(start) < 20*time.Second {
		tick()
	}
	if _, r := c.Target(); r != 3 {
		t.Fatalf("%d in flight, want the ceiling 3", r)
	}
	for _, r := c.Target(); r == 3 && now.Sub(start) < time.Minute; _, r = c.Target() {
		tick()
	}
	if _, r := c.Target(); r != 4 || now.Sub(start) < 30*time.Second {
		t.Fatalf("%d in flight at %v, want a probe to 4 after the 30 s quiet period", r, now.Sub(start))
	}
	last := c.Changes()[len(c.Changes())-1]
	if last.Reason != ReasonProbe || last.Throughput != 15000 || last.LatencyP50 != 100*time.Millisecond {
		t.Fatalf("last change %v", last)
	}
	c.Refused(now, TooManyREQs) // the cap is still there: the wait doubles
	if st := c.State(); st.CeilInflightPerConn != 3 || st.NextProbe.Sub(now) != time.Minute || st.InflightPerConn != 2 {
		t.Fatalf("state %+v", st)
	}
}

func TestEmptyPagesDoNotRaiseConcurrency(t *testing.T) {
	// A relay answering every REQ with an immediate empty EOSE (nostr-rs-relay
	// with limit_scrapers) shows no throughput to gain.
	c := mustNew(t, nil)
	now := t0
	for range 3000 {
		c.PageDone(now, 0, 0, 10*time.Millisecond)
		now = now.Add(20 * time.Millisecond)
	}
	// Every step up from the start is undone: never more than one
	// doubling above it.
	d := DefaultConfig()
	ups, undos := 0, 0
	for _, ch := range c.Changes() {
		if ch.Conns*ch.Inflight > 2*d.StartConns*d.StartInflightPerConn {
			t.Fatalf("grew to %dx%d on empty pages", ch.Conns, ch.Inflight)
		}
		switch ch.Reason {
		case ReasonIncrease, ReasonProbe:
			ups++
		case ReasonNoGain:
			undos++
		}
	}
	if ups == 0 || ups-undos > 1 {
		t.Fatalf("%d steps up, %d undone", ups, undos)
	}
}

func TestEffectivePageLimit(t *testing.T) {
	c, d := mustNew(t, nil), DefaultConfig()
	if n := c.EffectivePageLimit(); n != 5000 {
		t.Fatalf("initial %d", n)
	}
	c.PageSize(500)
	c.PageSize(500)
	c.PageSize(0)
	c.PageSize(7000) // a relay ignoring limit proves nothing about a clamp
	if n := c.EffectivePageLimit(); n != 5000 {
		t.Fatalf("after 2 pages %d, want no clamp yet", n)
	}
	c.PageSize(499)
	c.PageSize(500)
	if n := c.EffectivePageLimit(); n != 500 {
		t.Fatalf("after 3 pages of 500: %d", n)
	}
	c.PageSize(800) // a bigger page: 500 was not the clamp
	if n := c.EffectivePageLimit(); n != 5000 {
		t.Fatalf("after a page of 800: %d", n)
	}
	c.Refused(t0, LimitRejected)
	c.Refused(t0, LimitRejected)
	if n := c.EffectivePageLimit(); n != 1250 {
		t.Fatalf("after two rejections: %d, want 1250", n)
	}
	if conns, r := c.Target(); conns != d.StartConns || r != d.StartInflightPerConn || len(c.Changes()) != 0 {
		t.Fatal("a limit rejection changed concurrency")
	}
}

func TestChangesHistory(t *testing.T) {
	var seen []Change
	c := mustNew(t, func(c *Config) {
		c.History = 3
		c.StartConns, c.StartInflightPerConn = 8, 16
		c.OnChange = func(ch Change) { seen = append(seen, ch) }
	})
	for i := range 5 {
		c.Refused(t0.Add(time.Duration(i)*time.Minute), Timeout)
	}
	got := c.Changes()
	if len(seen) != 5 || len(got) != 3 {
		t.Fatalf("%d seen, %d kept", len(seen), len(got))
	}
	for i, ch := range got {
		if ch != seen[2+i] {
			t.Fatalf("kept %v, want the last three of %v", got, seen)
		}
	}
	if c.State().Changes != 5 {
		t.Fatal("change count")
	}
	if s := got[0].String(); s != "8x4 -> 4x4: refusal (timeout)" {
		t.Fatalf("String() = %q", s)
	}
}

func TestStrings(t *testing.T) {
	for r := RateLimited; r < numRefusals; r++ {
		if s := r.String(); s == "" || s[0] == 'R' {
			t.Errorf("%d: %q", r, s)
		}
	}
	if s := Refusal(99).String(); s != "Refusal(99)" {
		t.Error(s)
	}
	if s := ReasonProbe.String(); s != "probe" {
		t.Error(s)
	}
	if s := Reason(99).String(); s != "Reason(99)" {
		t.Error(s)
	}
}
