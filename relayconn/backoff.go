package relayconn

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the wait before a retry: Min doubled per attempt up to Max,
// then a pick in [d/2, d] so that crawlers retrying one relay spread out.
type Backoff struct {
	Min, Max time.Duration
	// Jitter picks the wait in [d/2, d]; nil picks uniformly at random.
	// Tests fix it to assert exact waits.
	Jitter func(d time.Duration) time.Duration
}

// Delay is the wait before retry attempt (1 is the first retry).
func (b Backoff) Delay(attempt int) time.Duration {
	d := min(b.Min<<min(attempt, 16), b.Max)
	if b.Jitter != nil {
		return b.Jitter(d)
	}
	return d/2 + rand.N(d/2+1)
}

// Wait waits Delay(attempt), or until ctx ends (its error then).
func (b Backoff) Wait(ctx context.Context, attempt int) error {
	t := time.NewTimer(b.Delay(attempt))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
