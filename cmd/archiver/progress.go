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

// progress shows a one-shot crawl's progress: a line redrawn in place on a
// terminal, a structured log line every 10 s otherwise. Stop waits for it.
type progress struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func startProgress(ctx context.Context, c *crawl.Crawler, log *zap.Logger, out *os.File) *progress {
	p := &progress{stop: make(chan struct{})}
	tty := isTerminal(out)
	every := 10 * time.Second
	if tty {
		every = 500 * time.Millisecond
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		start, last, lastAt := time.Now(), int64(0), time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.stop:
				if tty {
					fmt.Fprintln(out)
				}
				return
			case now := <-t.C:
				var sum crawl.Progress
				for _, r := range c.Progress() {
					sum.Events += r.Events
					sum.ShardsDone += r.ShardsDone
					sum.ShardsTotal += r.ShardsTotal
					sum.EstRemaining += r.EstRemaining
				}
				rate := float64(sum.Events-last) / now.Sub(lastAt).Seconds()
				avg := float64(sum.Events) / now.Sub(start).Seconds()
				last, lastAt = sum.Events, now
				eta := "?"
				if avg > 0 && sum.EstRemaining > 0 {
					eta = (time.Duration(sum.EstRemaining/avg) * time.Second).Round(time.Second).String()
				}
				if tty {
					drawProgress(out, sum, rate, eta)
				} else {
					log.Info("progress", zap.Int64("events", sum.Events), zap.Float64("events_per_sec", rate),
						zap.Int("shards_done", sum.ShardsDone), zap.Int("shards", sum.ShardsTotal), zap.String("eta", eta))
				}
			}
		}
	}()
	return p
}

func drawProgress(w io.Writer, p crawl.Progress, rate float64, eta string) {
	fmt.Fprintf(w, "\r\033[Kevents %d  %.0f/s  shards %d/%d  ETA %s", p.Events, rate, p.ShardsDone, p.ShardsTotal, eta)
}

func (p *progress) Stop() {
	close(p.stop)
	p.wg.Wait()
}
