package daemon

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/testrelay"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

func newDeadPort(t *testing.T) *testrelay.DeadPort {
	d, err := testrelay.NewDeadPort("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func refusingRelay(t *testing.T) string {
	r, err := testrelay.NewRefusing("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r.URL()
}

// simWorld signs the simulation's events with one key, each a second
// apart.
type simWorld struct {
	t   *testing.T
	sk  *btcec.PrivateKey
	seq int64
}

func (w *simWorld) note(content string) testrelay.Item {
	w.seq++
	it, err := testrelay.Signed(w.sk, &event.Event{CreatedAt: 1_700_000_000 + w.seq, Kind: 1, Content: content})
	if err != nil {
		w.t.Fatal(err)
	}
	return it
}

func (w *simWorld) relayList(urls ...string) testrelay.Item {
	w.seq++
	it, err := testrelay.RelayList(w.sk, 1_700_000_000+w.seq, urls...)
	if err != nil {
		w.t.Fatal(err)
	}
	return it
}

// sim is a loopback network: live relays (plain, slow, AUTH-only) whose
// events name each other in a chain from the first (the seed), plus dead
// and refusing relays that the lists name too.
type sim struct {
	live     []*testrelay.Relay
	dead     []*testrelay.DeadPort
	refusing []string
	ids      map[string]bool // every event the live relays hold
}

func newSim(t *testing.T, nLive, nDead, nRefusing int) *sim {
	sk, err := btcec.NewPrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	w := &simWorld{t: t, sk: sk}
	s := &sim{ids: map[string]bool{}}
	for i := range nLive {
		o := testrelay.Options{MaxLimit: 20}
		switch i % 4 {
		case 2:
			o.Latency = 20 * time.Millisecond // slow
		case 3:
			o.AuthRequired = true // serves only authenticated clients
		}
		r, err := testrelay.New(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		s.live = append(s.live, r)
	}
	for range nDead {
		s.dead = append(s.dead, newDeadPort(t))
	}
	for range nRefusing {
		s.refusing = append(s.refusing, refusingRelay(t))
	}
	var shared []testrelay.Item
	for i := range 10 {
		shared = append(shared, w.note(fmt.Sprintf("shared %d", i)))
	}
	// Relay i's list names relay i+1 and one dead or refusing relay: only
	// a crawl of the whole chain finds them all.
	var others []string
	for _, d := range s.dead {
		others = append(others, d.URL())
	}
	others = append(others, s.refusing...)
	for i, r := range s.live {
		items := append([]testrelay.Item(nil), shared...)
		for j := range 30 {
			items = append(items, w.note(fmt.Sprintf("relay %d note %d", i, j)))
		}
		var names []string
		if i+1 < len(s.live) {
			names = append(names, s.live[i+1].URL())
		}
		for k := i; k < len(others); k += len(s.live) {
			names = append(names, others[k])
		}
		if len(names) > 0 {
			items = append(items, w.relayList(names...))
		}
		r.Add(items...)
		for _, it := range items {
			s.ids[it.ID] = true
		}
	}
	return s
}

// simConfig is a daemon seeded with the first live relay only, discovery
// on, private targets allowed (everything is on loopback) and a backoff
// longer than the test, so that a dead relay dialed twice is a bug.
func simConfig(t *testing.T, dir, seed string) *config.Config {
	cfg, err := config.Load("", config.Overrides{DataDir: dir, Listen: "127.0.0.1:0", Relays: []string{seed}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Discover = config.Discover{Enabled: true, AllowPrivate: true, MaxRelays: 1000}
	cfg.Limits.BackoffMin, cfg.Limits.BackoffMax = config.Duration(time.Hour), config.Duration(time.Hour)
	cfg.Limits.MaxDials, cfg.Limits.DialsPerSecond = 4, 100
	cfg.Limits.MinFreeDiskBytes = 0
	key, _, _ := keyFile(t, 9, 0o600)
	cfg.AuthKeyFile = key
	return cfg
}

func runDaemon(t *testing.T, cfg *config.Config) (*Daemon, func()) {
	return runDaemonLog(t, cfg, zaptest.NewLogger(t))
}

func runDaemonLog(t *testing.T, cfg *config.Config, log *zap.Logger) (*Daemon, func()) {
	d, err := New(Options{Config: cfg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	return d, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// waitStatus polls the daemon's status until cond holds or 60 s pass.
func waitStatus(t *testing.T, d *Daemon, what string, cond func(*Status) bool) *Status {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := d.Status()
		if err != nil {
			t.Fatal(err)
		}
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			var lines []string
			for _, r := range st.Relays {
				lines = append(lines, fmt.Sprintf("%s %s %s %s", r.Relay.URL, r.State, r.LastFinish, r.LastError))
			}
			sort.Strings(lines)
			t.Fatalf("waiting for %s: schedule %v, valid %d, relays:\n%v", what, st.Schedule, st.Valid, lines)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSimDiscovery: from one seed, discovery finds every relay of the
// chain; every live relay (slow and AUTH-only ones too) is archived
// completely, with the events they share stored once; the dead and the
// refusing are dialed once each and wait in backoff with their reason. A
// restart resumes the discovered relays from the archive and does not
// dial the dead again.
func TestSimDiscovery(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	s := newSim(t, 8, 6, 2)
	dir := t.TempDir()
	cfg := simConfig(t, dir, s.live[0].URL())
	all := len(s.live) + len(s.dead) + len(s.refusing)

	archived := func(st *Status) bool {
		done := 0
		for _, r := range st.Relays {
			if r.BackfillComplete && r.LastFinish == "drained" {
				done++
			}
		}
		return done == len(s.live) && st.Valid == int64(len(s.ids)) && st.Pending == 0 &&
			st.Schedule["backoff"] == len(s.dead)+len(s.refusing)
	}
	summaryEvery = 100 * time.Millisecond
	t.Cleanup(func() { summaryEvery = time.Minute })
	core, logs := observer.New(zapcore.WarnLevel)
	d, stop := runDaemonLog(t, cfg, zap.New(core))
	st := waitStatus(t, d, "every relay found and archived", archived)
	if len(st.Relays) != all || st.Discovered != all-1 || st.Events != int64(len(s.ids)) {
		t.Errorf("%d relays, %d discovered, %d events; want %d, %d, %d", len(st.Relays), st.Discovered, st.Events, all, all-1, len(s.ids))
	}
	for _, r := range st.Relays {
		if r.Relay.URL != s.live[0].URL() && (r.Discovered == nil || r.Discovered.How != "nip65" || len(r.Discovered.From) != 64) {
			t.Errorf("%s: discovered %+v", r.Relay.URL, r.Discovered)
		}
		if r.State == "backoff" && (r.Failures != 1 || r.LastError == "" || r.NextDial == "") {
			t.Errorf("%s in backoff: %+v", r.Relay.URL, r.RelayStatus)
		}
	}
	for _, dr := range s.dead {
		if n := dr.Dials(); n != 1 {
			t.Errorf("dead relay %s dialed %d times, want 1", dr.URL(), n)
		}
	}
	// Metrics: one series per state, and the discovered relays share
	// relay="other" in the crawl's series.
	mfs, err := d.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "archiver_relays":
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "backoff" && m.GetGauge().GetValue() != float64(len(s.dead)+len(s.refusing)) {
					t.Errorf("archiver_relays{state=backoff} = %v", m.GetGauge().GetValue())
				}
			}
			if len(mf.GetMetric()) != 5 {
				t.Errorf("%d archiver_relays series", len(mf.GetMetric()))
			}
		case "archiver_crawl_events_total":
			var relays []string
			for _, m := range mf.GetMetric() {
				relays = append(relays, m.GetLabel()[0].GetValue())
			}
			sort.Strings(relays)
			if want := []string{"other", s.live[0].URL()}; fmt.Sprint(relays) != fmt.Sprint(want) {
				t.Errorf("archiver_crawl_events_total relays %v, want %v", relays, want)
			}
		}
	}
	waitStatus(t, d, "the notes saved", func(st *Status) bool { return st.UnsavedNotes == 0 })
	stop()
	// The dead and refusing relays' failures are summed up in summary
	// lines, not logged one by one.
	failures := 0
	for _, e := range logs.All() {
		if e.Message == "relays failed; backing off" {
			failures += int(e.ContextMap()["failures"].(int64))
		} else if e.ContextMap()["relay"] != nil {
			t.Errorf("a warning about one relay: %s %v", e.Message, e.ContextMap())
		}
	}
	if failures != len(s.dead)+len(s.refusing) {
		t.Errorf("summaries count %d failures, want %d", failures, len(s.dead)+len(s.refusing))
	}

	// The restart knows every relay, runs the live ones, and leaves the
	// dead in their backoff.
	d, stop = runDaemon(t, cfg)
	defer stop()
	// (Events already verified are not verified again: the relays can
	// only come from the persisted frontier.)
	waitStatus(t, d, "the persisted relays, the dead in backoff", func(st *Status) bool {
		return len(st.Relays) == all && st.Schedule["backoff"] == len(s.dead)+len(s.refusing)
	})
	waitStatus(t, d, "the live relays archived again", func(st *Status) bool {
		passes := 0
		for _, r := range st.Relays {
			if r.Passes > 0 && r.LastFinish == "drained" {
				passes++
			}
		}
		return passes == len(s.live)
	})
	for _, dr := range s.dead {
		if n := dr.Dials(); n != 1 {
			t.Errorf("dead relay %s dialed %d times across the restart, want 1", dr.URL(), n)
		}
	}
}

// With private targets refused (the default), a loopback relay named in
// an event is neither added nor dialed, while the configured seed (the
// operator's choice) is archived.
func TestSimPrivateRefused(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	s := newSim(t, 2, 1, 0)
	cfg := simConfig(t, t.TempDir(), s.live[0].URL())
	cfg.Discover.AllowPrivate = false
	d, stop := runDaemon(t, cfg)
	defer stop()
	st := waitStatus(t, d, "the seed archived", func(st *Status) bool {
		return len(st.Relays) == 1 && st.Relays[0].LastFinish == "drained" && st.Pending == 0 && st.Refused >= 1
	})
	if st.Discovered != 0 || s.dead[0].Dials() != 0 {
		t.Errorf("discovered %d, the private dead relay dialed %d times", st.Discovered, s.dead[0].Dials())
	}
}

// A discovered relay is refused at dial time when its address is private,
// whatever its name said; a configured one is not.
func TestDiscoveredDialRefusesPrivateAddress(t *testing.T) {
	dead := newDeadPort(t)
	cfg := simConfig(t, t.TempDir(), dead.URL())
	cfg.Discover.AllowPrivate = false
	d, err := New(Options{Config: cfg, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.store.Close()
	defer d.ln.Close()
	d.relays["ws://relay.example:1"] = &relayLoop{found: &Discovered{How: "nip65"}}
	d.relays[dead.URL()] = &relayLoop{}
	if dial := d.dialerFor(dead.URL()); dial != nil {
		t.Error("a configured relay gets the private-address guard")
	}
	dial := d.dialerFor("ws://relay.example:1")
	if dial == nil {
		t.Fatal("a discovered relay has no guard")
	}
	// relay.example resolving to loopback, as a hostile DNS answer would:
	// the guard sees the address it connects to.
	c, err := dial(context.Background(), "tcp", strings.TrimPrefix(dead.URL(), "ws://"))
	if err == nil || !strings.Contains(err.Error(), "private address") {
		t.Errorf("dial to %s: %v", dead.URL(), err)
	}
	if c != nil {
		c.Close()
	}
	if dead.Dials() != 0 {
		t.Errorf("the private address was connected to %d times", dead.Dials())
	}
	// A job's crawl checks at each dial too, unless private targets are
	// allowed.
	d.cfg.NATS = &config.NATS{}
	if o := d.jobCrawlOptions(); o.Dialer == nil {
		t.Error("a job's crawl dials without the private-address guard")
	} else if c, err := o.Dialer(context.Background(), "tcp", strings.TrimPrefix(dead.URL(), "ws://")); err == nil {
		c.Close()
		t.Error("a job's crawl connected to a private address")
	}
	d.cfg.NATS.AllowPrivateTargets = true
	if o := d.jobCrawlOptions(); o.Dialer != nil {
		t.Error("allow_private_targets, and still a guard")
	}
	if dead.Dials() != 0 {
		t.Errorf("the private address was connected to %d times", dead.Dials())
	}
}
