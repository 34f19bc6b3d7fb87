package crawl

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nostr-archiver/archiver/relayconn"
	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"
)

// Retries in virtual time (testing/synctest), with the backoff's jitter
// fixed at its most, so each schedule is asserted to the exact duration:
// with the defaults (250 ms doubled per attempt, at most 30 s) the waits
// are 0.5, 1, 2, 4, 8, 16, 30, 30 s.

func most(d time.Duration) time.Duration { return d }

// testRelay is a relay's crawl state with just enough set up to retry:
// a controller, metrics, and a finish that cancels nothing.
func testRelay(t *testing.T, o Options) *relayCrawl {
	t.Helper()
	o.jitter = most
	o.setDefaults()
	c := &Crawler{opts: o, conns: semaphore.NewWeighted(1)}
	r := &relayCrawl{c: c, url: "ws://relay.test", log: zap.NewNop(), metrics: o.Metrics.forRelay("ws://relay.test"), cancel: func() {}, limit: 500}
	ctrl, err := c.newController(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	r.ctrl = ctrl
	return r
}

// A relay's first connection is retried up to MaxAttempts dials: 8 dials
// over exactly 61.5 s of backoff (a minute of real time before the
// Dialer seam). A refused port gets only 3 dials, 1.5 s.
func TestDialBackoffVirtual(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		dials int64
		took  time.Duration
	}{
		{"reset", syscall.ECONNRESET, 8, 61500 * time.Millisecond},
		{"refused", syscall.ECONNREFUSED, refusedAttempts, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var dials atomic.Int64
				r := testRelay(t, Options{Dialer: func(context.Context, string, string) (net.Conn, error) {
					dials.Add(1)
					return nil, &net.OpError{Op: "dial", Net: "tcp", Err: tc.err}
				}})
				start := time.Now()
				_, err := newConnPool(r).dial(context.Background(), true)
				took := time.Since(start)
				// errUnreachable carries the last dial error as text.
				if !errors.Is(err, errUnreachable) || !strings.Contains(err.Error(), tc.err.Error()) {
					t.Fatalf("dial: %v, want unreachable after %v", err, tc.err)
				}
				if dials.Load() != tc.dials || took != tc.took {
					t.Errorf("%d dials over %v, want %d over %v", dials.Load(), took, tc.dials, tc.took)
				}
				if r.rec.Refusals["dial-error"] != tc.dials {
					t.Errorf("refusals %v, want %d dial errors", r.rec.Refusals, tc.dials)
				}
			})
		})
	}
}

// A page the relay refused is retried after a backoff that depends on the
// refusal: a rate limit (CLOSED rate-limited:) is no failure of the page
// and waits longer each time (from attempt 3: 2, 4, 8, 16, 30 s) without
// ever giving up; a NOTICE, a timeout or a lost connection counts toward
// MaxAttempts (0.5, 1, 2 s ...) and the relay's crawl ends at the 8th,
// with no wait after it.
func TestPageRetryBackoffVirtual(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name     string
		page     relayconn.Page
		waits    []time.Duration
		gaveUp   bool
		refusal  string
		failures int // counted toward MaxAttempts
	}{
		{"rate-limited", relayconn.Page{End: relayconn.EndClosed, Reason: "rate-limited: slow down"},
			[]time.Duration{2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s, 30 * s, 30 * s, 30 * s, 30 * s}, false, "rate-limited", 0},
		{"strfry's rate limit", relayconn.Page{End: relayconn.EndClosed, Reason: "ERROR: rate-limited: too fast"},
			[]time.Duration{2 * s, 4 * s, 8 * s}, false, "rate-limited", 0},
		{"notice", relayconn.Page{End: relayconn.EndNotice, Reason: "too many concurrent REQs"},
			[]time.Duration{s / 2, s, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 0}, true, "notice", 8},
		{"timeout", relayconn.Page{End: relayconn.EndTimeout},
			[]time.Duration{s / 2, s, 2 * s}, false, "timeout", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := testRelay(t, Options{})
				r.conns = newConnPool(r)
				pc := &poolConn{}
				var failures, slowdowns int
				for i, want := range tc.waits {
					page := tc.page
					start := time.Now()
					if r.usable(context.Background(), pc, &page, &failures, &slowdowns, "test page") {
						t.Fatalf("retry %d: a refused page was usable", i+1)
					}
					if took := time.Since(start); took != want {
						t.Errorf("retry %d waited %v, want %v", i+1, took, want)
					}
				}
				res, done := r.finished()
				if done != tc.gaveUp || tc.gaveUp && res.Finish != FinishGaveUp {
					t.Errorf("finished %v (%v), want gave up: %v", done, res, tc.gaveUp)
				}
				if failures != tc.failures || r.rec.Refusals[tc.refusal] != int64(len(tc.waits)) {
					t.Errorf("%d failures, refusals %v; want %d failures and %d %s", failures, r.rec.Refusals, tc.failures, len(tc.waits), tc.refusal)
				}
			})
		})
	}
}
