package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/crawl"
	"go.uber.org/zap"
)

// Relay states shown by /status.
const (
	StateBackfill = "backfill" // paging history
	StateLive     = "live"     // tailing new events until the next catch-up
	StateWaiting  = "waiting"  // the last pass failed; retrying after a pause
	StateStopped  = "stopped"  // finished a bounded job (until set), or stopping
)

// relayLoop keeps one relay archived: backfill (a crawl job that resumes
// where the last run stopped and, for an open range, extends to now), then
// a live tail until the catch-up interval passes, then the backfill job
// again (it extends from just before the last run's end, which catches
// events backdated past the tail), and so on.
type relayLoop struct {
	d      *Daemon
	cfg    config.Relay
	cancel context.CancelFunc
	log    *zap.Logger

	mu               sync.Mutex
	state            string
	backfillComplete bool
	last             crawl.Result
	passes           int
}

// startRelaysLocked starts a loop for every relay of cfg not running yet.
// Caller holds d.mu.
func (d *Daemon) startRelaysLocked(cfg *config.Config) {
	for _, rc := range cfg.Relays {
		if _, ok := d.relays[rc.URL]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(d.runCtx)
		l := &relayLoop{d: d, cfg: rc, cancel: cancel, log: d.log.With(zap.String("relay", rc.URL)), state: StateBackfill}
		d.relays[rc.URL] = l
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			l.run(ctx)
		}()
	}
}

func (l *relayLoop) set(f func(l *relayLoop)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l)
}

func (l *relayLoop) run(ctx context.Context) {
	retry := time.Minute
	for ctx.Err() == nil {
		l.set(func(l *relayLoop) { l.state = StateBackfill })
		start := time.Now()
		res := l.backfill(ctx)
		if ctx.Err() != nil {
			break
		}
		// Incomplete walls and unproven ranges are reported, not retried
		// at once: paging the same relay again soon would yield the same.
		// The live tail starts, but the backfill is complete only when
		// drained: /status's backfill_complete is a promise.
		ok := res.Finish == crawl.FinishDrained || res.Finish == crawl.FinishIncompleteWalls || res.Finish == crawl.FinishUnproven
		l.set(func(l *relayLoop) {
			l.last, l.passes = res, l.passes+1
			if ok {
				// A pass that could not reach the relay leaves the last
				// finished pass's word standing.
				l.backfillComplete = res.Drained()
			}
		})
		if !ok {
			l.log.Warn("backfill pass failed; retrying", zap.String("finish", res.Finish), zap.String("detail", res.Detail), zap.Duration("in", retry))
			l.set(func(l *relayLoop) { l.state = StateWaiting })
			if !sleep(ctx, retry) {
				break
			}
			retry = min(2*retry, time.Duration(l.cfg.CatchupInterval))
			continue
		}
		retry = time.Minute
		if !l.cfg.Live || l.cfg.Until != 0 {
			break // a bounded job is done
		}
		l.set(func(l *relayLoop) { l.state = StateLive })
		tailCtx, cancel := context.WithTimeout(ctx, time.Duration(l.cfg.CatchupInterval))
		since := start.Add(-time.Duration(l.cfg.TailOverlap)).Unix()
		c, err := l.crawler()
		if err == nil {
			err = c.Tail(tailCtx, l.cfg.URL, crawl.TailOptions{Since: since, Overlap: time.Duration(l.cfg.TailOverlap)})
		}
		if err != nil {
			l.log.Warn("live tail refused", zap.Error(err))
			l.set(func(l *relayLoop) { l.state = StateWaiting })
			sleep(tailCtx, time.Duration(l.cfg.CatchupInterval))
		}
		cancel()
	}
	l.set(func(l *relayLoop) { l.state = StateStopped })
}

func (l *relayLoop) backfill(ctx context.Context) crawl.Result {
	c, err := l.crawler()
	if err != nil {
		return crawl.Result{Relay: l.cfg.URL, Finish: crawl.FinishGaveUp, Detail: err.Error()}
	}
	return c.Run(ctx, []string{l.cfg.URL})[0]
}

// crawler builds the crawl for this relay's job from the configuration.
func (l *relayLoop) crawler() (*crawl.Crawler, error) {
	o := l.d.crawlOptions()
	o.Since, o.Until, o.Kinds, o.Authors = int64(l.cfg.Since), int64(l.cfg.Until), l.cfg.Kinds, l.cfg.Authors
	c, err := crawl.New(o)
	return c, err
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// RelayStatus is one relay's entry in /status.
type RelayStatus struct {
	State            string `json:"state"`
	BackfillComplete bool   `json:"backfill_complete"`
	Passes           int    `json:"passes"`
	LastFinish       string `json:"last_finish,omitempty"`
	LastDetail       string `json:"last_detail,omitempty"`
}

func (l *relayLoop) status() RelayStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	return RelayStatus{State: l.state, BackfillComplete: l.backfillComplete, Passes: l.passes, LastFinish: l.last.Finish, LastDetail: l.last.Detail}
}
