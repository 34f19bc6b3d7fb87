package diskguard

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestNextPaused(t *testing.T) {
	const floor = 1000 // resume at 1100
	for _, tc := range []struct {
		paused bool
		free   uint64
		want   bool
	}{
		{false, 5000, false},
		{false, 1000, false}, // at the floor is not below it
		{false, 999, true},
		{false, 0, true},
		{true, 999, true},
		{true, 1000, true}, // back at the floor: still paused
		{true, 1099, true}, // inside the band
		{true, 1100, false},
		{true, 5000, false},
	} {
		if got := nextPaused(tc.paused, tc.free, floor); got != tc.want {
			t.Errorf("nextPaused(%v, %d, %d) = %v, want %v", tc.paused, tc.free, floor, got, tc.want)
		}
	}
	// MinFree 0 disables the guard.
	if nextPaused(false, 0, 0) {
		t.Error("MinFree 0 paused")
	}
}

func TestResumeAt(t *testing.T) {
	for _, tc := range []struct{ min, want uint64 }{
		{0, 0},
		{1000, 1100},
		{1 << 30, 1<<30 + (1<<30)/10},
		{math.MaxUint64 - 5, math.MaxUint64},
	} {
		if got := ResumeAt(tc.min); got != tc.want {
			t.Errorf("ResumeAt(%d) = %d, want %d", tc.min, got, tc.want)
		}
	}
}

// fakeDisk is an injected Statfs whose answer the test sets.
type fakeDisk struct {
	free atomic.Uint64
	err  atomic.Pointer[error]
}

func (d *fakeDisk) statfs(dir string) (uint64, error) {
	if e := d.err.Load(); e != nil {
		return 0, *e
	}
	return d.free.Load(), nil
}

// changes records OnChange calls.
type changes struct {
	mu  sync.Mutex
	got []string
}

func (c *changes) record(paused bool, free uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if paused {
		c.got = append(c.got, "pause")
	} else {
		c.got = append(c.got, "resume")
	}
}

func (c *changes) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

func TestNew(t *testing.T) {
	disk := &fakeDisk{}
	if _, err := New(Options{Statfs: disk.statfs}); err == nil {
		t.Error("New without Dir: no error")
	}
	if _, err := New(Options{Dir: "d", Interval: -time.Second, Statfs: disk.statfs}); err == nil {
		t.Error("New with a negative Interval: no error")
	}
	boom := errors.New("boom")
	disk.err.Store(&boom)
	if _, err := New(Options{Dir: "d", Statfs: disk.statfs}); !errors.Is(err, boom) {
		t.Errorf("New with a failing Statfs: %v", err)
	}
	disk.err.Store(nil)

	// Already below the floor: paused from the start, and told so.
	disk.free.Store(10)
	var c changes
	g, err := New(Options{Dir: "d", MinFree: 100, Statfs: disk.statfs, OnChange: c.record})
	if err != nil {
		t.Fatal(err)
	}
	if !g.Paused() || g.Free() != 10 {
		t.Errorf("Paused() = %v, Free() = %d; want true, 10", g.Paused(), g.Free())
	}
	if got := c.list(); len(got) != 1 || got[0] != "pause" {
		t.Errorf("OnChange calls %v, want [pause]", got)
	}
}

// Run follows the disk with hysteresis, one check per Interval.
func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 5 * time.Second
		disk := &fakeDisk{}
		disk.free.Store(5000)
		var c changes
		g, err := New(Options{Dir: "d", MinFree: 1000, Interval: interval, Statfs: disk.statfs, OnChange: c.record})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			g.Run(ctx)
			close(done)
		}()

		for i, step := range []struct {
			free   uint64
			paused bool
		}{
			{2000, false},
			{999, true},
			{1050, true}, // above the floor, inside the band
			{1099, true},
			{1100, false},
			{1000, false}, // at the floor
			{500, true},
			{20000, false},
		} {
			disk.free.Store(step.free)
			time.Sleep(interval)
			synctest.Wait()
			if g.Paused() != step.paused || g.Free() != step.free {
				t.Errorf("step %d: free %d: Paused() = %v, Free() = %d; want %v", i, step.free, g.Paused(), g.Free(), step.paused)
			}
		}
		want := []string{"pause", "resume", "pause", "resume"}
		if got := c.list(); !slices.Equal(got, want) {
			t.Errorf("OnChange calls %v, want %v", got, want)
		}

		cancel()
		<-done
	})
}

// Between two checks nothing changes: the guard reacts on the tick.
func TestRunInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		disk := &fakeDisk{}
		disk.free.Store(5000)
		g, err := New(Options{Dir: "d", MinFree: 1000, Statfs: disk.statfs})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			g.Run(ctx)
			close(done)
		}()
		disk.free.Store(10)
		time.Sleep(DefaultInterval - time.Nanosecond)
		synctest.Wait()
		if g.Paused() {
			t.Error("paused before the first tick")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if !g.Paused() {
			t.Error("not paused after the first tick")
		}
		cancel()
		<-done
	})
}

func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		disk := &fakeDisk{}
		disk.free.Store(5000)
		g, err := New(Options{Dir: "d", MinFree: 1000, Interval: interval, Statfs: disk.statfs})
		if err != nil {
			t.Fatal(err)
		}
		// Not paused: Wait returns at once, even with a done context.
		expired, stop := context.WithCancel(t.Context())
		stop()
		if err := g.Wait(expired); err != nil {
			t.Errorf("Wait while running: %v", err)
		}

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			g.Run(ctx)
			close(done)
		}()
		disk.free.Store(100)
		time.Sleep(interval)
		synctest.Wait()
		if !g.Paused() {
			t.Fatal("not paused")
		}

		// Paused: Wait blocks until the resume, then returns nil.
		var waitErr atomic.Pointer[error]
		waited := make(chan struct{})
		go func() {
			err := g.Wait(ctx)
			waitErr.Store(&err)
			close(waited)
		}()
		// And a Wait whose context ends returns the context's error.
		short, shortCancel := context.WithTimeout(ctx, interval/2)
		defer shortCancel()
		if err := g.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait with an expiring context: %v", err)
		}

		disk.free.Store(1099) // inside the band: still paused
		time.Sleep(interval)
		synctest.Wait()
		select {
		case <-waited:
			t.Fatal("Wait returned inside the band")
		default:
		}

		disk.free.Store(1100)
		time.Sleep(interval)
		synctest.Wait()
		select {
		case <-waited:
			if err := *waitErr.Load(); err != nil {
				t.Errorf("Wait after resume: %v", err)
			}
		default:
			t.Fatal("Wait still blocked after resume")
		}

		cancel()
		<-done
	})
}

// A failing check is reported and changes nothing.
func TestRunError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		disk := &fakeDisk{}
		disk.free.Store(10)
		var errs atomic.Int32
		g, err := New(Options{Dir: "d", MinFree: 1000, Interval: time.Second, Statfs: disk.statfs,
			OnError: func(error) { errs.Add(1) }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			g.Run(ctx)
			close(done)
		}()
		boom := errors.New("boom")
		disk.err.Store(&boom)
		disk.free.Store(1 << 40)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if n := errs.Load(); n != 3 {
			t.Errorf("OnError called %d times, want 3", n)
		}
		if !g.Paused() || g.Free() != 10 {
			t.Errorf("after failed checks: Paused() = %v, Free() = %d; want true, 10", g.Paused(), g.Free())
		}
		cancel()
		<-done
	})
}

func TestStatfs(t *testing.T) {
	free, err := statfs(t.TempDir())
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil || free == 0 {
		t.Errorf("statfs = %d, %v", free, err)
	}
	if _, err := statfs(t.TempDir() + "/missing"); err == nil {
		t.Error("statfs of a missing directory: no error")
	}
}

// With Extra, the floor is MinFree + Extra() + twice the last interval's
// growth: a fast writer pauses while a fixed floor would still let it
// run into ENOSPC before the next check.
func TestFloorFollowsGrowth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 5 * time.Second
		disk := &fakeDisk{}
		disk.free.Store(10000)
		g, err := New(Options{Dir: "d", MinFree: 1000, Interval: interval, Statfs: disk.statfs, Extra: func() uint64 { return 500 }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			g.Run(ctx)
			close(done)
		}()
		for i, step := range []struct {
			free, floor uint64
			paused      bool
		}{
			{10000, 1500, false},
			{8000, 1500 + 2*2000, false},
			{5000, 1500 + 2*3000, true}, // a fixed floor of 1000 would not pause here
			{5000, 1500, false},         // no growth: back over 1.1 x 1500
			{4900, 1500 + 2*100, false},
		} {
			disk.free.Store(step.free)
			time.Sleep(interval)
			synctest.Wait()
			if g.Paused() != step.paused || g.Floor() != step.floor {
				t.Errorf("step %d: free %d: Paused() = %v, Floor() = %d; want %v, %d", i, step.free, g.Paused(), g.Floor(), step.paused, step.floor)
			}
		}
		cancel()
		<-done
	})
}
