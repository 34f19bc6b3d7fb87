// Package diskguard pauses work while the data directory's file system is
// nearly full. Pebble fails hard on ENOSPC (a failed WAL write is fatal),
// so the crawler stops fetching before that happens, and resumes when an
// operator (or a compaction) has freed space.
//
// Hysteresis: the guard pauses when free space drops below MinFree and
// resumes only when it rises to MinFree*1.1 or more. Without the 10% band
// a store hovering at the floor would flap between paused and running on
// every check, each resume writing a little and pausing again.
package diskguard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultInterval is how often Run checks when Options.Interval is 0.
// Crawl writes are bounded per batch, so free space cannot drop by much
// more than a few batches between two checks.
const DefaultInterval = 10 * time.Second

// Options configure a Guard.
type Options struct {
	// Dir is a directory on the file system to watch (the data directory).
	Dir string
	// MinFree is the floor in bytes. 0 disables the guard: it never pauses.
	MinFree uint64
	// Interval between checks; 0 means DefaultInterval.
	Interval time.Duration
	// Statfs returns the bytes available to an unprivileged user on dir's
	// file system; nil means the statfs(2) syscall (f_bavail * f_bsize).
	// Tests inject their own.
	Statfs func(dir string) (free uint64, err error)
	// OnChange, if set, is called on every change of Paused with the free
	// space that caused it (from New if the disk is already below the
	// floor, then from Run). It must not block: it runs on the checking
	// goroutine.
	OnChange func(paused bool, free uint64)
	// OnError, if set, is called when a check fails; the guard then keeps
	// its state until a check succeeds.
	OnError func(err error)
	// Extra, if set, returns the space the store itself needs free on
	// top of MinFree (rawstore.Store.SpaceNeeded: its memtables' flush
	// and WAL), and makes the floor MinFree + Extra() + twice the space
	// the last interval took, so that a pause comes before Pebble's own
	// needs are reached whatever the disk's size and however fast the
	// crawl writes (a fixed MinFree of 8 MiB let a crawl reach ENOSPC).
	// Without it the floor is MinFree. MinFree 0 disables the guard.
	Extra func() uint64
}

// Guard watches free space. Its methods are safe for concurrent use.
type Guard struct {
	opts Options

	mu      sync.Mutex
	paused  bool
	free    uint64
	growth  uint64        // space taken during the last interval
	floor   uint64        // the floor of the last check
	resumed chan struct{} // closed on resume; replaced on pause
}

// New checks the free space once, so that Paused is right before Run
// starts, and returns a Guard; it fails if Dir cannot be checked.
func New(opts Options) (*Guard, error) {
	if opts.Dir == "" {
		return nil, errors.New("diskguard: no Dir")
	}
	if opts.Interval < 0 {
		return nil, fmt.Errorf("diskguard: negative Interval %v", opts.Interval)
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Statfs == nil {
		opts.Statfs = statfs
	}
	g := &Guard{opts: opts, resumed: make(chan struct{})}
	close(g.resumed)
	if err := g.check(); err != nil {
		return nil, err
	}
	return g, nil
}

// Run checks every Interval until ctx is done. The caller owns the
// goroutine that runs it.
func (g *Guard) Run(ctx context.Context) {
	t := time.NewTicker(g.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := g.check(); err != nil && g.opts.OnError != nil {
				g.opts.OnError(err)
			}
		}
	}
}

// Paused reports whether free space is below the floor (and has not yet
// risen back above the resume mark).
func (g *Guard) Paused() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused
}

// Free returns the free bytes seen by the last successful check.
func (g *Guard) Free() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.free
}

// Wait returns nil at once when not paused; while paused it blocks until
// the guard resumes (nil) or ctx is done (ctx.Err()). The crawler calls it
// before each batch.
func (g *Guard) Wait(ctx context.Context) error {
	g.mu.Lock()
	resumed := g.resumed
	g.mu.Unlock()
	select {
	case <-resumed:
		return nil
	default:
	}
	select {
	case <-resumed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// check reads the free space and applies it.
func (g *Guard) check() error {
	free, err := g.opts.Statfs(g.opts.Dir)
	if err != nil {
		return fmt.Errorf("diskguard: statfs %s: %w", g.opts.Dir, err)
	}
	g.mu.Lock()
	if g.free > free {
		g.growth = g.free - free
	} else if g.free != 0 {
		g.growth = 0
	}
	g.free = free
	g.floor = g.floorLocked()
	was := g.paused
	g.paused = nextPaused(was, free, g.floor)
	switch {
	case g.paused && !was:
		g.resumed = make(chan struct{})
	case !g.paused && was:
		close(g.resumed)
	}
	now := g.paused
	g.mu.Unlock()
	if now != was && g.opts.OnChange != nil {
		g.opts.OnChange(now, free)
	}
	return nil
}

// floorLocked is MinFree + Extra() + 2*growth, saturating; 0 when
// MinFree is 0 (the guard is off).
func (g *Guard) floorLocked() uint64 {
	if g.opts.MinFree == 0 {
		return 0
	}
	if g.opts.Extra == nil {
		return g.opts.MinFree
	}
	f := g.opts.MinFree
	for _, add := range []uint64{g.opts.Extra(), g.growth, g.growth} {
		if f > ^uint64(0)-add {
			return ^uint64(0)
		}
		f += add
	}
	return f
}

// Floor returns the floor the last check applied (see Options.Extra).
func (g *Guard) Floor() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.floor
}

// nextPaused is the whole policy: pause below minFree, resume at
// ResumeAt(minFree) or above, otherwise stay as is.
func nextPaused(paused bool, free, minFree uint64) bool {
	if paused {
		return free < ResumeAt(minFree)
	}
	return free < minFree
}

// ResumeAt is the free space at which a paused guard resumes:
// minFree*1.1, saturating instead of overflowing.
func ResumeAt(minFree uint64) uint64 {
	band := minFree / 10
	if minFree > ^uint64(0)-band {
		return ^uint64(0)
	}
	return minFree + band
}
