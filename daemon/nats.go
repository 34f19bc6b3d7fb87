package daemon

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/jobs"
	"go.uber.org/zap"
)

// runJobs consumes crawl jobs from NATS JetStream until ctx ends (the
// daemon runs without NATS when the configuration has no [nats]). Each
// job crawls into this node's own archive. A NATS outage is retried: the
// daemon keeps archiving its configured relays meanwhile.
func (d *Daemon) runJobs(ctx context.Context) {
	cfg := d.cfg.NATS
	host, _ := os.Hostname()
	node := fmt.Sprintf("%s-%d", host, os.Getpid())
	log := d.log.With(zap.String("node", node), zap.String("nats", cfg.URL))
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 && !sleep(ctx, min(time.Duration(attempt)*5*time.Second, time.Minute)) {
			return
		}
		nc, err := jobs.Connect(*cfg, "archiver "+node)
		if err != nil {
			log.Error("cannot connect to NATS; retrying", zap.Error(err))
			continue
		}
		js, err := jetstream.New(nc)
		if err == nil {
			var w *jobs.Worker
			w, err = jobs.New(jobs.WorkerOptions{
				JS: js, Subjects: jobs.SubjectsFrom(*cfg), Store: d.store, NodeID: node,
				MaxConcurrent: cfg.MaxConcurrentJobs, AllowPrivate: cfg.AllowPrivateTargets, Logger: log,
				CrawlOptions: func(*jobs.Job) crawl.Options { return d.crawlOptions() },
			})
			if err == nil {
				log.Info("consuming crawl jobs")
				err = w.Run(ctx)
			}
		}
		nc.Close()
		if err != nil {
			log.Error("job worker stopped; retrying", zap.Error(err))
		}
	}
}

// crawlOptions are the daemon's crawl limits, for configured relays and
// jobs alike.
func (d *Daemon) crawlOptions() crawl.Options {
	lim := d.cfg.Limits
	return crawl.Options{
		Store: d.store, Logger: d.log, Metrics: d.crawlM,
		MaxConns: lim.MaxConnections, MaxConnsPerRelay: lim.MaxConnectionsPerRelay, MaxInFlightPerConn: lim.MaxInflightPerConn,
		PageTimeout: time.Duration(lim.PageTimeout), MaxFrame: int(lim.MaxFrameBytes),
		ConnLimiter: d.conns,
		Pause:       d.guard.Wait,
		OnCommit:    d.pool.Notify,
		AuthKeys:    d.auth.Load(),
	}
}
