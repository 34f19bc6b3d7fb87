package interop

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/lazyparse"
	"github.com/nostr-archiver/archiver/rawstore"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sync/errgroup"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	publishCount    = 3000
	publishInFlight = 64
	// The relay caps a REQ's limit at 10x its default of 100.
	nostrRelayMaxLimit = 1000
)

// TestNostrRelay archives a relay built from the @nostr-relay npm packages
// (SQLite storage) and checks that the archive holds exactly what was
// published, verified. That relay returns the events of one second
// newest-inserted first (not by id, as NIP-01 asks) and caps limit at
// 1000, so the crawl must rely on neither.
func TestNostrRelay(t *testing.T) {
	// About 20 s; -race on a loaded 2-core machine about 60 s (signing).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	relay := startNostrRelay(t)

	start := time.Now()
	f := newFixture(publishCount)
	signed := make(chan *event.Event, publishInFlight)
	signCtx, stopSigning := context.WithCancel(ctx)
	var signer errgroup.Group
	signer.Go(func() error { return f.sign(signCtx, signed) })
	defer func() { // a no-op unless publish failed
		stopSigning()
		for range signed {
		}
		_ = signer.Wait()
	}()
	n := publish(t, ctx, relay, signed, publishInFlight)
	if err := signer.Wait(); err != nil {
		t.Fatalf("sign: %v", err)
	}
	if n != len(f.events) {
		t.Fatalf("published %d of %d events", n, len(f.events))
	}
	t.Logf("signed and published %d events in %v", n, time.Since(start))

	want := make(map[[32]byte]*event.Event, len(f.events))
	for _, e := range f.events {
		want[e.ID] = e
	}
	for _, tc := range []struct {
		name      string
		pageLimit int
		shards    int     // 0: the crawler's default
		wantLimit int     // the page size the relay really serves
		wantWalls []int64 // seconds the crawl must meet as walls
		// This relay answers no NIP-45 COUNT, so a wall split by the kinds
		// and authors its full pages showed cannot be proven complete:
		// the crawl says so (incomplete-walls), though it fetched them all.
		wantFinish string
	}{
		{name: "small pages", pageLimit: 100, wantLimit: 100, wantWalls: []int64{f.wallByKind, f.wallByAuthor}, wantFinish: crawl.FinishIncompleteWalls},
		// Two shards of 1,500 events: pages fill up to the relay's clamp
		// (with the default 32, placed where the events are, none would).
		{name: "limit above the relay's cap", pageLimit: 2000, shards: 2, wantLimit: nostrRelayMaxLimit, wantFinish: crawl.FinishDrained},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			st, res := archive(t, ctx, relay, tc.pageLimit, tc.shards)
			t.Logf("crawled and verified in %v: %v", time.Since(start), res)
			if res.Finish != tc.wantFinish {
				t.Errorf("finish %v, want %s", res, tc.wantFinish)
			}
			checkArchive(t, st, want)
			checkRecord(t, st, tc.wantLimit, tc.wantWalls)
		})
	}
}

// archive crawls relay into a new store and verifies what it fetched.
func archive(t *testing.T, ctx context.Context, relay string, pageLimit, shards int) (*rawstore.Store, crawl.Result) {
	t.Helper()
	st, err := rawstore.Open(rawstore.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	c, err := crawl.New(crawl.Options{
		Store:     st,
		PageLimit: pageLimit,
		Shards:    shards,
		Logger:    zaptest.NewLogger(t),
		// A local relay needs no patience; a failing page should fail fast.
		BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	results := c.Run(ctx, []string{relay})
	if len(results) != 1 {
		t.Fatalf("crawl: %v", results)
	}
	p, err := lazyparse.New(lazyparse.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Drain(ctx); err != nil {
		t.Fatalf("verify: %v", err)
	}
	return st, results[0]
}

// checkArchive asserts the store holds exactly want, every copy verified
// and decoding to the event as published.
func checkArchive(t *testing.T, st *rawstore.Store, want map[[32]byte]*event.Event) {
	t.Helper()
	got := map[[32]byte]bool{}
	err := st.ForEachValid(func(id [32]byte, raw []byte) error {
		got[id] = true
		e, err := event.Parse(raw)
		if err != nil {
			t.Errorf("archived %x does not parse: %v", id[:8], err)
			return nil
		}
		w, ok := want[id]
		if !ok {
			t.Errorf("archived %x was never published: %.300s", id[:8], raw)
			return nil
		}
		if !reflect.DeepEqual(normalize(e), normalize(w)) {
			t.Errorf("archived %x differs from what was published:\n got %s\nwant %s",
				id[:8], event.AppendJSON(nil, e), event.AppendJSON(nil, w))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for id, e := range want {
		if !got[id] {
			missing = append(missing, hex.EncodeToString(id[:8])+"@"+time.Unix(e.CreatedAt, 0).UTC().Format(time.TimeOnly))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		t.Errorf("%d of %d published events missing from the archive, e.g. %v",
			len(missing), len(want), missing[:min(len(missing), 10)])
	}

	s, err := st.Stats()
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(want))
	if s.Events != n || s.Valid != n || s.Invalid != 0 || s.Pending != 0 || len(s.InvalidCopies) != 0 {
		t.Errorf("stats %+v, want %d events, all valid, none invalid or pending", s, n)
	}
	t.Logf("stats: %+v", s)
}

// normalize makes nil and empty tags compare equal (a parse yields one).
func normalize(e *event.Event) event.Event {
	c := *e
	if len(c.Tags) == 0 {
		c.Tags = nil
	}
	return c
}

// checkRecord asserts what the crawler recorded about the relay: the page
// size the relay really served, the walls it completed, and no refusals.
func checkRecord(t *testing.T, st *rawstore.Store, wantLimit int, wantWalls []int64) {
	t.Helper()
	relays, err := st.Relays()
	if err != nil {
		t.Fatal(err)
	}
	if len(relays) != 1 {
		t.Fatalf("store knows %d relays, want 1", len(relays))
	}
	var rec crawl.RelayRecord
	if err := json.Unmarshal(relays[0].Record, &rec); err != nil {
		t.Fatalf("relay record: %v", err)
	}
	t.Logf("relay record: pages=%d effective_limit=%d requested_limit=%d out_of_range=%d reconnects=%d refusals=%v walls=%+v",
		rec.Pages, rec.EffectiveLimit, rec.RequestedLimit, rec.OutOfRange, rec.Reconnects, rec.Refusals, rec.Walls)
	if rec.EffectiveLimit != wantLimit {
		t.Errorf("effective limit %d, want %d", rec.EffectiveLimit, wantLimit)
	}
	if len(rec.Refusals) != 0 || rec.Reconnects != 0 || rec.OutOfRange != 0 {
		t.Errorf("refusals %v, reconnects %d, out-of-range events %d: want none from a local relay",
			rec.Refusals, rec.Reconnects, rec.OutOfRange)
	}
	var walls []int64
	for _, w := range rec.Walls {
		walls = append(walls, w.Second)
		if w.Complete || w.Count != 0 || len(w.Unsplit) == 0 {
			t.Errorf("wall %d on a relay without COUNT reported as %+v, want incomplete with the reason", w.Second, w)
		}
	}
	slices.Sort(walls)
	if !slices.Equal(walls, wantWalls) {
		t.Errorf("walls at %v, want %v", walls, wantWalls)
	}
}
