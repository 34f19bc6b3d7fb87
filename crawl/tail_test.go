package crawl_test

import (
	"context"
	"encoding/hex"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/testrelay"
	"go.uber.org/zap/zaptest"
)

// A live tail stores what the relay pushes after EOSE, reconnects when the
// relay drops it, and resumes without losing what was published meanwhile.
func TestTail(t *testing.T) {
	checkLeaks(t)
	f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 5, Events: 1200, CacheDir: fixtureCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	// Split the corpus by time: the oldest 400 are history, the rest are
	// "published" while the tail runs.
	items := f.Chronological()
	history, future := items[:400], items[400:]
	relay := startRelay(t, testrelay.Options{}, history)
	a := openArchive(t)
	c, err := crawl.New(crawl.Options{Store: a.store, Logger: zaptest.NewLogger(t), BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := tailing(t, c, relay.URL(), crawl.TailOptions{Since: f.Since, Flush: 20 * time.Millisecond, Overlap: time.Hour})
	a.waitHeld(t, int64(len(history)))
	// Published live, oldest first, in batches; halfway the relay starts
	// dropping connections.
	for i := 0; i < len(future); i += 100 {
		if i == 400 {
			_ = relay.SetOptions(func(o *testrelay.Options) { o.DropEvery = 500 }) // more than a reconnect replays
		}
		relay.Add(future[i:min(i+100, len(future))]...)
		time.Sleep(10 * time.Millisecond)
	}
	a.waitHeld(t, int64(len(items)))
	if relay.Stats().Drops == 0 {
		t.Error("the relay never dropped the tail: reconnection untested")
	}
	if err := stop(); err != nil {
		t.Errorf("tail: %v", err)
	}
	a.verify(t)
	assertExactValidSet(t, a, f)
}

// Events published with an old created_at while the tail is connected (a
// client sending a user's history to a relay the user just added) are
// stored, down to the job's floor: a live filter with the resume point's
// since would never see them.
func TestTailBackdated(t *testing.T) {
	checkLeaks(t)
	f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 8, Events: 600, CacheDir: fixtureCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	items := f.Chronological() // every one valid: only Events is set
	// The oldest 100 are under the floor, the next 200 are published
	// backdated while the tail runs, the newest 300 are the history.
	under, backdated, history := items[:100], items[100:300], items[300:]
	floor, since := backdated[0].CreatedAt, history[0].CreatedAt
	relay := startRelay(t, testrelay.Options{}, history)
	a := openArchive(t)
	c, err := crawl.New(crawl.Options{Store: a.store, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	stop := tailing(t, c, relay.URL(), crawl.TailOptions{Since: since, Floor: floor, Flush: 10 * time.Millisecond, Overlap: time.Second})
	a.waitHeld(t, int64(len(history)))
	relay.Add(under...)
	relay.Add(backdated...)
	a.waitHeld(t, int64(len(history)+len(backdated)))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	a.verify(t)
	got := map[string]bool{}
	for id := range a.exported(t) {
		got[hex.EncodeToString(id[:])] = true
	}
	if len(got) != len(history)+len(backdated) {
		t.Errorf("exported %d events, want %d", len(got), len(history)+len(backdated))
	}
	for _, it := range under {
		if got[it.ID] {
			t.Fatalf("event %s, created under the floor, was stored", it.ID)
		}
	}
	for _, set := range [][]testrelay.Item{history, backdated} {
		for _, it := range set {
			if !got[it.ID] {
				t.Fatalf("event %s (created_at %d) is missing", it.ID, it.CreatedAt)
			}
		}
	}
}

// A relay that closes a REQ naming limit 0 (taking it for a bad limit) is
// tailed without the filter for backdated events: the history and what
// is published later still arrive, instead of a REQ refused on every
// reconnect.
func TestTailLimitZeroRefused(t *testing.T) {
	checkLeaks(t)
	f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 9, Events: 400, CacheDir: fixtureCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	items := f.Chronological() // every one valid: only Events is set
	history, later := items[:300], items[300:]
	relay := startRelay(t, testrelay.Options{RejectLimitZero: true}, history)
	a := openArchive(t)
	c, err := crawl.New(crawl.Options{Store: a.store, Logger: zaptest.NewLogger(t), BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := tailing(t, c, relay.URL(), crawl.TailOptions{Since: f.Since, Flush: 10 * time.Millisecond, Overlap: time.Hour})
	a.waitHeld(t, int64(len(history)))
	relay.Add(later...)
	a.waitHeld(t, int64(len(items)))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	a.verify(t)
	assertExactValidSet(t, a, f)
}

// tailing runs c.Tail of url with opts until the test ends or stop is
// called, which returns Tail's error.
func tailing(t *testing.T, c *crawl.Crawler, url string, opts crawl.TailOptions) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Tail(ctx, url, opts) }()
	var err error
	stopped := false
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			err = <-done
		}
		return err
	}
	t.Cleanup(func() { _ = stop() }) // before the store closes, even on failure
	return stop
}

// waitHeld waits until the archive holds at least n events.
func (a *archive) waitHeld(t *testing.T, n int64) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, _ := a.store.Stats(); st.Events >= n {
			return
		}
		if time.Now().After(deadline) {
			st, _ := a.store.Stats()
			t.Fatalf("archive holds %d events, want %d", st.Events, n)
		}
	}
}
