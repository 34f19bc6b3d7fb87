package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/testrelay"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts an in-process relay with fo's fixture and page clamp limit.
func serve(t *testing.T, fo testrelay.FixtureOptions, limit int) (*testrelay.Relay, *testrelay.Fixture) {
	t.Helper()
	fx, err := testrelay.Generate(fo)
	if err != nil {
		t.Fatal(err)
	}
	r, err := testrelay.New(testrelay.Options{MaxLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	r.Add(fx.Items...)
	return r, fx
}

func TestReadRawReadsEveryEventOnce(t *testing.T) {
	const events, limit = 3000, 40
	// Ten events a second and 40-event pages: most pages end inside a
	// second, whose rest comes on the next page with the repeats.
	r, fx := serve(t, testrelay.FixtureOptions{Seed: 7, Events: events, Since: 1_700_000_000 - 300, Until: 1_700_000_000}, limit)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	oldest, newest, err := probeRange(ctx, r.URL(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if oldest < fx.Since || newest > fx.Until || newest-oldest < 250 {
		t.Fatalf("probeRange = [%d, %d], fixture spans [%d, %d]", oldest, newest, fx.Since, fx.Until)
	}
	for _, tc := range []struct{ conns, inflight int }{{1, 1}, {2, 3}} {
		res, err := readRaw(ctx, rawOptions{URL: r.URL(), Conns: tc.conns, Inflight: tc.inflight, Limit: limit,
			Since: oldest, Until: newest, PageTimeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("%dx%d: %v", tc.conns, tc.inflight, err)
		}
		if res.Events != events {
			t.Errorf("%dx%d: read %d events, want %d", tc.conns, tc.inflight, res.Events, events)
		}
		if res.Repeats == 0 || res.WireBytes <= res.Bytes {
			t.Errorf("%dx%d: %d repeats, %d wire bytes for %d bytes: no page ended inside a second?", tc.conns, tc.inflight, res.Repeats, res.WireBytes, res.Bytes)
		}
		if min := int64(events / limit); res.Pages < min {
			t.Errorf("%dx%d: %d pages, want at least %d", tc.conns, tc.inflight, res.Pages, min)
		}
	}
}

func TestReadRawStopsAtAWall(t *testing.T) {
	r, fx := serve(t, testrelay.FixtureOptions{Seed: 7, Events: 100, Wall: 60}, 40)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := readRaw(ctx, rawOptions{URL: r.URL(), Conns: 1, Inflight: 1, Limit: 40,
		Since: fx.Since, Until: fx.Until, PageTimeout: 5 * time.Second})
	if !errors.Is(err, errWall) {
		t.Fatalf("err = %v, want errWall", err)
	}
}

func TestTimeShards(t *testing.T) {
	for _, tc := range []struct {
		since, until int64
		n, want      int
	}{
		{0, 99, 4, 4},
		{10, 10, 4, 1},
		{0, 6, 3, 3},
		{5, 1000, 16, 16},
	} {
		got := timeShards(tc.since, tc.until, tc.n)
		if len(got) != tc.want {
			t.Fatalf("timeShards(%d, %d, %d) made %d shards, want %d", tc.since, tc.until, tc.n, len(got), tc.want)
		}
		// Newest first, contiguous, covering [since, until] exactly.
		next := tc.until
		for _, s := range got {
			if s[1] != next || s[0] > s[1] {
				t.Fatalf("timeShards(%d, %d, %d) = %v: not contiguous newest-first", tc.since, tc.until, tc.n, got)
			}
			next = s[0] - 1
		}
		if next != tc.since-1 {
			t.Fatalf("timeShards(%d, %d, %d) = %v: does not reach since", tc.since, tc.until, tc.n, got)
		}
	}
}
