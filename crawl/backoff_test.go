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

	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"
)

// A relay's first connection is retried with exponential backoff and full
// jitter, up to MaxAttempts dials, each wait in [d/2, d] for d =
// min(BackoffMin<<attempt, BackoffMax): with the defaults, 8 dials over
// 30.75 s to 61.5 s (a minute of real time before this seam). A refused
// port gets only 3.
func TestDialBackoffVirtual(t *testing.T) {
	o := DefaultOptions()
	// window is the least and most total backoff before the n-th dial.
	window := func(n int) (lo, hi time.Duration) {
		for attempt := 1; attempt < n; attempt++ {
			d := min(o.BackoffMin<<attempt, o.BackoffMax)
			lo, hi = lo+d/2, hi+d
		}
		return lo, hi
	}
	lo, hi := window(o.MaxAttempts)
	rlo, rhi := window(refusedAttempts)
	for _, tc := range []struct {
		name   string
		err    error
		dials  int64
		lo, hi time.Duration
	}{
		{"reset", syscall.ECONNRESET, int64(o.MaxAttempts), lo, hi},
		{"refused", syscall.ECONNREFUSED, refusedAttempts, rlo, rhi},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var dials atomic.Int64
				opts := Options{Dialer: func(context.Context, string, string) (net.Conn, error) {
					dials.Add(1)
					return nil, &net.OpError{Op: "dial", Net: "tcp", Err: tc.err}
				}}
				opts.setDefaults()
				c := &Crawler{opts: opts, conns: semaphore.NewWeighted(1)}
				r := &relayCrawl{c: c, url: "ws://relay.test", log: zap.NewNop(), metrics: opts.Metrics.forRelay("ws://relay.test")}
				start := time.Now()
				_, err := newConnPool(r).dial(context.Background(), true)
				took := time.Since(start)
				t.Logf("%d dials over %v of virtual backoff", dials.Load(), took)
				// errUnreachable carries the last dial error as text.
				if !errors.Is(err, errUnreachable) || !strings.Contains(err.Error(), tc.err.Error()) {
					t.Fatalf("dial: %v, want unreachable after %v", err, tc.err)
				}
				if dials.Load() != tc.dials {
					t.Errorf("%d dials, want %d", dials.Load(), tc.dials)
				}
				if took < tc.lo || took > tc.hi {
					t.Errorf("backoff took %v, want within [%v, %v]", took, tc.lo, tc.hi)
				}
				if r.rec.Refusals["dial-error"] != tc.dials {
					t.Errorf("refusals %v, want %d dial errors", r.rec.Refusals, tc.dials)
				}
			})
		})
	}
}
