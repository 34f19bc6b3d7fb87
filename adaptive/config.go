package adaptive

import (
	"errors"
	"fmt"
	"time"
)

// ErrConfig is wrapped by every Validate error.
var ErrConfig = errors.New("adaptive: invalid config")

// Config sizes one relay's controller. NIP-11 fields are priors (0 = not
// advertised); the user caps are hard limits.
type Config struct {
	// MaxSubscriptions is NIP-11 limitation.max_subscriptions (per
	// connection): in-flight REQs per connection never exceed it. Subtract
	// any subscriptions the crawler keeps for itself (COUNT, wall
	// sub-queries, NIP-77) before passing it.
	MaxSubscriptions int
	// MaxLimit is NIP-11 limitation.max_limit: pages never ask for more.
	MaxLimit int

	// MaxConns and MaxInflightPerConn are the user's caps per relay.
	MaxConns           int
	MaxInflightPerConn int
	// StartConns x StartInflightPerConn is where a relay starts,
	// conservatively (clamped to the caps).
	StartConns           int
	StartInflightPerConn int

	// PageLimit is the `limit` asked before the relay's clamp is known
	// (capped by MaxLimit).
	PageLimit int
	// ClampEvidence is how many not-last pages must come back at the same
	// largest size below PageLimit before that size is taken as the clamp.
	ClampEvidence int

	// An epoch measures one configuration: after a warm-up of one page per
	// in-flight slot, EpochRounds pages per slot and at least MinEpoch
	// (half of it in slow start).
	EpochRounds int
	MinEpoch    time.Duration
	// GainFraction: an increase is kept if throughput rose by at least this
	// fraction of what a linear gain (proportional to in-flight REQs) would
	// give.
	GainFraction float64
	// LatencyFactor: an increase is undone if the epoch's p50 page latency
	// exceeds this multiple of the best p50 seen (the relay is queueing).
	LatencyFactor float64

	// Backoff multiplies the dimension a refusal points at (0 < Backoff < 1).
	Backoff float64
	// RefusalHold: refusals within this (or twice the p50 latency, if
	// longer) after a decrease are the same overload and do not decrease
	// again.
	RefusalHold time.Duration
	// QuietPeriod: after this long without a refusal or a failed step, the
	// controller probes one step past what it learned. A probe that draws
	// a refusal doubles the wait, up to MaxQuietPeriod.
	QuietPeriod    time.Duration
	MaxQuietPeriod time.Duration

	// History is how many changes Changes keeps.
	History int
	// OnChange, if set, is called synchronously with every change, from
	// the method that made it.
	OnChange func(Change)
}

// DefaultConfig returns the defaults: start at 1 connection x 4 REQs, cap at
// 8 x 16 (under strfry's old 20-subscription default), learn the rest.
func DefaultConfig() Config {
	return Config{
		MaxConns:             8,
		MaxInflightPerConn:   16,
		StartConns:           1,
		StartInflightPerConn: 4,
		PageLimit:            5000, // nostream's cap; strfry clamps to 500, learned from pages
		ClampEvidence:        3,
		EpochRounds:          2,
		MinEpoch:             2 * time.Second,
		GainFraction:         0.5,
		LatencyFactor:        1.5,
		Backoff:              0.5,
		RefusalHold:          2 * time.Second,
		QuietPeriod:          30 * time.Second,
		MaxQuietPeriod:       5 * time.Minute,
		History:              64,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	bad := func(field string, v any) error { return fmt.Errorf("%w: %s = %v", ErrConfig, field, v) }
	switch {
	case c.MaxSubscriptions < 0:
		return bad("MaxSubscriptions", c.MaxSubscriptions)
	case c.MaxLimit < 0:
		return bad("MaxLimit", c.MaxLimit)
	case c.MaxConns < 1:
		return bad("MaxConns", c.MaxConns)
	case c.MaxInflightPerConn < 1:
		return bad("MaxInflightPerConn", c.MaxInflightPerConn)
	case c.StartConns < 1:
		return bad("StartConns", c.StartConns)
	case c.StartInflightPerConn < 1:
		return bad("StartInflightPerConn", c.StartInflightPerConn)
	case c.PageLimit < 1:
		return bad("PageLimit", c.PageLimit)
	case c.ClampEvidence < 1:
		return bad("ClampEvidence", c.ClampEvidence)
	case c.EpochRounds < 1:
		return bad("EpochRounds", c.EpochRounds)
	case c.MinEpoch <= 0:
		return bad("MinEpoch", c.MinEpoch)
	case !(c.GainFraction > 0 && c.GainFraction <= 1):
		return bad("GainFraction", c.GainFraction)
	case !(c.LatencyFactor > 1):
		return bad("LatencyFactor", c.LatencyFactor)
	case !(c.Backoff > 0 && c.Backoff < 1):
		return bad("Backoff", c.Backoff)
	case c.RefusalHold < 0:
		return bad("RefusalHold", c.RefusalHold)
	case c.QuietPeriod <= 0:
		return bad("QuietPeriod", c.QuietPeriod)
	case c.MaxQuietPeriod < c.QuietPeriod:
		return bad("MaxQuietPeriod", c.MaxQuietPeriod)
	case c.History < 0:
		return bad("History", c.History)
	}
	return nil
}
