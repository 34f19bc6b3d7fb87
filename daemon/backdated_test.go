package daemon

import (
	"cmp"
	"context"
	"encoding/hex"
	"slices"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/testrelay"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

// Events published to a relay with an old created_at after the daemon
// archived its history (a user's notes sent to a relay they just added)
// are archived: those published during a catch-up pass and between passes
// (the tail takes them), and those published while the daemon was down
// (the first pass of the next run rechecks the relay's earlier ranges
// against its COUNT). Before, the tail subscribed from just before the
// last pass with `since`, so the relay pushed none of them, and no pass
// paged a range it had proven again: none was archived, with
// backfill_complete true.
func TestBackdatedEventsArchived(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	f := cachedFixture(t, testrelay.FixtureOptions{Seed: 41, Events: 1500})
	items := slices.Clone(f.Items) // every one valid: only Events is set
	slices.SortFunc(items, func(a, b testrelay.Item) int { return cmp.Compare(a.CreatedAt, b.CreatedAt) })
	duringPass, whileLive, whileDown, history := items[:100], items[100:200], items[200:300], items[300:]
	// Pages take a while, so that a catch-up pass is seen running.
	r := serveItems(t, testrelay.Options{SupportCount: true, Latency: 50 * time.Millisecond}, history)
	dir := t.TempDir()

	type running struct {
		d      *Daemon
		cancel context.CancelFunc
		done   chan error
	}
	start := func() *running {
		cfg, err := config.Load("", config.Overrides{DataDir: dir, Listen: "127.0.0.1:0", Relays: []string{r.URL()}})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Relays[0].CatchupInterval = config.Duration(300 * time.Millisecond)
		cfg.Limits.MinFreeDiskBytes = 0
		d, err := New(Options{Config: cfg, Logger: zaptest.NewLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		run := &running{d: d, cancel: cancel, done: make(chan error, 1)}
		go func() { run.done <- d.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-run.done }) // a second receive after stop: Run's error is sent once
		return run
	}
	stop := func(run *running) {
		run.cancel()
		if err := <-run.done; err != nil {
			t.Errorf("Run: %v", err)
		}
		run.done <- nil
	}
	waitFor := func(run *running, what string, ok func(*Status) bool) *Status {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			st := getStatus(t, run.d.Addr())
			if len(st.Relays) == 1 && ok(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %+v", what, st.Relays)
			}
		}
	}

	run := start()
	waitFor(run, "the backfill", func(st *Status) bool { return st.Relays[0].BackfillComplete && st.Events == int64(len(history)) })
	waitFor(run, "a catch-up pass", func(st *Status) bool { return st.Relays[0].State == StateBackfill && st.Relays[0].Passes >= 1 })
	r.Add(duringPass...)
	waitFor(run, "the tail between passes", func(st *Status) bool { return st.Relays[0].State == StateLive && st.Relays[0].Passes >= 2 })
	r.Add(whileLive...)
	held := int64(len(history) + len(duringPass) + len(whileLive))
	st := waitFor(run, "the events published while tailed", func(st *Status) bool { return st.Events == held && st.Pending == 0 })
	// Every pass proved its ranges by COUNT: the record joins them
	// instead of growing by a range per shard of every catch-up.
	if rel := st.Relays[0]; len(rel.Coverage) != 1 || rel.Coverage[0].Proof != "count" || rel.Coverage[0].Until != 0 {
		t.Errorf("after %d passes, coverage %+v; want one range, open, proven by COUNT", rel.Passes, rel.Coverage)
	}
	stop(run)

	r.Add(whileDown...)
	run = start()
	waitFor(run, "the events published while the daemon was down", func(st *Status) bool {
		return st.Relays[0].BackfillComplete && st.Events == int64(len(items)) && st.Pending == 0
	})
	stop(run)

	store, err := rawstore.Open(rawstore.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	got := map[string]bool{}
	if err := store.ForEachValid(func(id [32]byte, _ []byte) error {
		got[hex.EncodeToString(id[:])] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if !got[it.ID] {
			t.Errorf("event %s (created_at %d) not archived", it.ID, it.CreatedAt)
		}
	}
}
