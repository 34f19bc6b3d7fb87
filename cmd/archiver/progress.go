package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/nostr-archiver/archiver/crawl"
	"go.uber.org/zap"
)

// console is the process's stderr, shared by the log, the messages for
// people and a crawl's progress line. It is the one writer of the
// terminal: every write first clears the progress line and then draws it
// again below what was written, so a log line never lands in the middle
// of it.
type console struct {
	mu     sync.Mutex
	out    io.Writer
	tty    bool
	status string // the progress line on screen, "" if none
}

// stderr is where every command writes what is not its output.
var stderr = &console{out: os.Stderr, tty: isTerminal(os.Stderr)}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

const clearLine = "\r\033[K"

// Write writes p (whole lines) above the progress line.
func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.status != "" {
		_, _ = io.WriteString(c.out, clearLine)
	}
	n, err := c.out.Write(p)
	if c.status != "" {
		_, _ = io.WriteString(c.out, c.status)
	}
	return n, err
}

// Sync implements zapcore.WriteSyncer; a terminal or pipe has nothing to
// flush (and syncing one fails with EINVAL).
func (c *console) Sync() error { return nil }

// setStatus draws line as the progress line; "" removes it.
func (c *console) setStatus(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = io.WriteString(c.out, clearLine+line)
	c.status = line
}

// progress shows a one-shot command's progress: a line redrawn in place
// on a terminal, a log line every 10 s otherwise. Stop waits for it.
type progress struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

// report is what one progress tick shows: the terminal's line, or the log
// line's fields.
type report func(now time.Time) (line string, fields []zap.Field)

func startProgress(ctx context.Context, log *zap.Logger, out *console, rep report) *progress {
	p := &progress{stop: make(chan struct{})}
	every := 10 * time.Second
	if out.tty {
		every = 500 * time.Millisecond
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if out.tty {
			defer out.setStatus("")
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.stop:
				return
			case now := <-t.C:
				line, fields := rep(now)
				if out.tty {
					out.setStatus(line)
				} else {
					log.Info("progress", fields...)
				}
			}
		}
	}()
	return p
}

// crawlReport reports a crawl's events, rate, shards and ETA.
func crawlReport(c *crawl.Crawler) report {
	start, last, lastAt := time.Now(), int64(0), time.Now()
	return func(now time.Time) (string, []zap.Field) {
		var sum crawl.Progress
		for _, r := range c.Progress() {
			sum.Events += r.Events
			sum.ShardsDone += r.ShardsDone
			sum.ShardsTotal += r.ShardsTotal
			sum.EstRemaining += r.EstRemaining
		}
		rate := float64(sum.Events-last) / now.Sub(lastAt).Seconds()
		last, lastAt = sum.Events, now
		eta := "?"
		if d, ok := estimateETA(sum, now.Sub(start)); ok {
			eta = d.String()
		}
		return fmt.Sprintf("events %d  %.0f/s  shards %d/%d  ETA %s", sum.Events, rate, sum.ShardsDone, sum.ShardsTotal, eta),
			[]zap.Field{zap.Int64("events", sum.Events), zap.Float64("events_per_sec", rate),
				zap.Int("shards_done", sum.ShardsDone), zap.Int("shards", sum.ShardsTotal), zap.String("eta", eta)}
	}
}

// estimateETA estimates the time left of a crawl that has run for elapsed,
// or reports that it cannot. Two estimates, the larger wins: the events
// the density model expects in the unfinished shards at the average rate
// so far, and the unfinished shards at the pace of the finished ones. The
// model knows only what pages have shown (unseen stretches look empty),
// so alone it says "0s" with most shards left; shards differ in size, so
// alone their pace misleads too. Before either has anything to go on
// (the first seconds, no shard finished and no density learned) the ETA
// is unknown, never 0.
func estimateETA(p crawl.Progress, elapsed time.Duration) (time.Duration, bool) {
	if p.ShardsTotal > 0 && p.ShardsDone >= p.ShardsTotal {
		return 0, true
	}
	if elapsed < 3*time.Second || p.ShardsTotal == 0 {
		return 0, false
	}
	var eta time.Duration
	if p.Events > 0 && p.EstRemaining > 0 {
		rate := float64(p.Events) / elapsed.Seconds()
		eta = time.Duration(p.EstRemaining / rate * float64(time.Second))
	}
	if p.ShardsDone > 0 {
		left := p.ShardsTotal - p.ShardsDone
		eta = max(eta, elapsed*time.Duration(left)/time.Duration(p.ShardsDone))
	}
	if eta == 0 {
		return 0, false
	}
	return max(eta, time.Second).Round(time.Second), true
}

func (p *progress) Stop() {
	close(p.stop)
	p.wg.Wait()
}
