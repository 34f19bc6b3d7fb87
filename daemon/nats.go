package daemon

import (
	"context"
	"fmt"
	"os"
	"sync"
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
	node := d.opts.NodeID
	if node == "" {
		host, _ := os.Hostname()
		node = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
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
		subj := jobs.SubjectsFrom(*cfg)
		js, err := jetstream.New(nc)
		var w *jobs.Worker
		if err == nil {
			w, err = jobs.New(jobs.WorkerOptions{
				JS: js, Subjects: subj, Store: d.store, NodeID: node,
				MaxConcurrent: cfg.MaxConcurrentJobs, AllowPrivate: cfg.AllowPrivateTargets, Logger: log,
				CrawlOptions: func(*jobs.Job) crawl.Options { return d.jobCrawlOptions() },
			})
		}
		if err == nil {
			_, _, err = jobs.EnsureStream(ctx, js, subj) // before the sweeper submits
		}
		if err == nil {
			log.Info("consuming crawl jobs")
			wctx, stop := context.WithCancel(ctx)
			var sw sync.WaitGroup
			if d.sweep != nil {
				sw.Add(1)
				go func() { defer sw.Done(); d.runSweep(wctx, js, subj, node, log) }()
			}
			err = w.Run(wctx)
			stop()
			sw.Wait()
		}
		nc.Close()
		if err != nil {
			log.Error("job worker stopped; retrying", zap.Error(err))
		}
	}
}

// jobCrawlOptions are the crawl options of a job: the daemon's, and,
// unless private targets are allowed, a dialer that checks again at each
// dial (a name that resolved to a public address when the job was
// accepted may not any more).
func (d *Daemon) jobCrawlOptions() crawl.Options {
	o := d.crawlOptions()
	if !d.cfg.NATS.AllowPrivateTargets {
		o.Dialer = publicOnly
	}
	return o
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
