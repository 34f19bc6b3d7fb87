// Package daemon is `archiver run`: it keeps the configured relays
// archived (backfill, then a live tail with a periodic catch-up crawl),
// verifies what arrives, serves /metrics, /healthz and /status (and, with
// [serve], the archive itself as a read-only relay), talks to
// systemd, pauses when the disk fills up, and picks up new relays on
// reload.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/diskguard"
	"github.com/nostr-archiver/archiver/lazyparse"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/sched"
	"github.com/nostr-archiver/archiver/sdnotify"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"
)

// Options configure a Daemon.
type Options struct {
	Config *config.Config
	// Reload returns the configuration to switch to on Reload (e.g. the
	// file read again with the same flag overrides).
	Reload func() (*config.Config, error)
	Logger *zap.Logger
	// Statfs, if set, replaces the free-space check of the data directory
	// (tests).
	Statfs func(dir string) (uint64, error)
	// DiskInterval, if set, replaces how often the free space is checked
	// (tests: diskguard's 10 s default made a test wait for its next
	// check).
	DiskInterval time.Duration
	// NodeID names this node in the fleet's job records; default
	// <hostname>-<pid>.
	NodeID string
}

// Daemon runs the archive service. Its methods are safe for concurrent use.
type Daemon struct {
	opts    Options
	log     *zap.Logger
	reg     *prometheus.Registry
	store   *rawstore.Store
	pool    *lazyparse.Pool
	guard   *diskguard.Guard
	crawlM  *crawl.Metrics
	conns   *semaphore.Weighted
	metrics *metrics
	ln      net.Listener
	serveLn net.Listener // [serve]'s, nil without
	// auth holds the NIP-42 keys (*crawl.AuthKeys, nil for none), swapped
	// by Reload; relay loops and jobs read it for each crawl.
	auth atomic.Pointer[crawl.AuthKeys]
	// metricsRelays are the relays with their own crawl series (see
	// config.Limits.MetricsRelays), swapped by Reload.
	metricsRelays atomic.Pointer[map[string]bool]

	// sched decides when each relay is dialed and run (see package
	// sched); notes persists its records and the discovered relays.
	sched *sched.Scheduler
	notes *notes

	mu     sync.Mutex
	cfg    *config.Config
	relays map[string]*relayLoop // by URL
	wg     sync.WaitGroup        // the scheduler (which owns the relay runs), the NATS worker
	runCtx context.Context
	// saved holds the persisted scheduler records of relays not handed
	// to the scheduler yet; frontier the relays earlier runs discovered.
	saved              map[string]sched.Record
	frontier           map[string]Discovered
	nDiscovered        int // relays discovery added
	refusedDiscoveries int // URLs the lists, the private guard or max_relays refused
	// sweep, with [nats] and [discover] both on, submits the discovered
	// relays to the fleet's queue (swept) instead of running them here.
	sweep *sweeper
	swept map[string]bool
}

// New opens the archive and binds the HTTP listener, so that errors in
// either are reported before Run.
func New(opts Options) (*Daemon, error) {
	if opts.Config == nil {
		return nil, errors.New("daemon: Config is required")
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	cfg := opts.Config
	d := &Daemon{opts: opts, log: opts.Logger, reg: prometheus.NewRegistry(), cfg: cfg, relays: map[string]*relayLoop{}}
	// Keys first: a key file every user may read stops the daemon before
	// it opens anything.
	auth, err := cfg.AuthKeys(os.Getenv)
	if err != nil {
		return nil, err
	}
	d.auth.Store(auth)
	d.reg.MustRegister(collectors.NewGoCollector())
	d.metrics = newMetrics(d.reg)
	store, err := rawstore.Open(rawstore.Options{Dir: cfg.DataDir, Logger: d.log, HotBytes: rawstore.VerifyHotBytes, EventListener: &pebble.EventListener{
		WriteStallBegin: func(pebble.WriteStallBeginInfo) { d.metrics.writeStalls.Inc() },
		DiskSlow:        func(pebble.DiskSlowInfo) { d.metrics.diskSlow.Inc() },
		BackgroundError: func(err error) { d.log.Error("pebble background error", zap.Error(err)) },
	}})
	if err != nil {
		return nil, err
	}
	d.store = store
	d.metrics.registerStore(d.reg, store)
	d.notes = &notes{store: store, log: d.log}
	d.saved, err = loadNotes[sched.Record](store, noteSchedule)
	if err == nil && cfg.Discover.Enabled {
		d.frontier, err = loadNotes[Discovered](store, noteDiscovered)
	}
	if err == nil {
		po := lazyparse.Options{Store: store, Workers: cfg.Limits.Workers(), Logger: d.log, Metrics: lazyparse.NewMetrics(d.reg)}
		if cfg.Discover.Enabled {
			po.OnJudged = d.onJudged
		}
		d.pool, err = lazyparse.New(po)
	}
	if err == nil {
		d.guard, err = diskguard.New(diskguard.Options{
			Dir: cfg.DataDir, MinFree: uint64(cfg.Limits.MinFreeDiskBytes), Statfs: opts.Statfs, Interval: opts.DiskInterval,
			OnChange: d.diskChanged,
			OnError:  func(err error) { d.log.Error("checking free disk space", zap.Error(err)) },
			Extra:    store.SpaceNeeded,
		})
	}
	if err == nil {
		d.ln, err = net.Listen("tcp", cfg.Listen)
	}
	if err == nil {
		if err = d.bindServe(); err != nil {
			d.ln.Close()
		}
	}
	if err != nil {
		store.Close()
		return nil, err
	}
	d.crawlM = crawl.NewMetrics(d.reg)
	d.metricsRelays.Store(metricsRelays(cfg))
	d.crawlM.KeepRelays(func(u string) bool { return (*d.metricsRelays.Load())[u] })
	d.conns = semaphore.NewWeighted(int64(cfg.Limits.MaxConnections))
	if cfg.NATS != nil && cfg.Discover.Enabled {
		d.sweep, d.swept = newSweeper(), map[string]bool{}
		d.sweep.claim(relayURLs(cfg))
	}
	d.sched = d.newScheduler()
	d.registerSchedMetrics(d.reg)
	return d, nil
}

// Addr is the address /metrics, /healthz and /status are served on.
func (d *Daemon) Addr() string { return d.ln.Addr().String() }

func (d *Daemon) diskChanged(paused bool, free uint64) {
	d.metrics.diskPaused.Set(b2f(paused))
	if paused {
		d.log.Error("free disk space under the floor: crawling paused until space returns",
			zap.String("dir", d.cfg.DataDir), zap.Uint64("free_bytes", free), zap.Uint64("min_free_bytes", uint64(d.cfg.Limits.MinFreeDiskBytes)))
		_ = sdnotify.Status("paused: disk nearly full")
	} else {
		d.log.Info("free disk space back over the floor: crawling resumes", zap.Uint64("free_bytes", free))
		_ = sdnotify.Status("archiving")
	}
}

// Run serves until ctx ends, then shuts down in order: stop sending REQs
// and let the relays' last batches commit (their cursors with them), stop
// the verify pool after its batch, stop the HTTP server, close Pebble.
// It returns when all of that is done or the stop timeout passed.
func (d *Daemon) Run(ctx context.Context) error {
	srv := &http.Server{Handler: d.handler(), ReadHeaderTimeout: 5 * time.Second}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Serve(d.ln) }()
	relay := d.startServe()

	bg, stopBG := context.WithCancel(context.Background())
	var bgWG sync.WaitGroup
	// The notes are written until every relay run has stopped, then once
	// more; the failure summary is logged meanwhile.
	bgWG.Add(4)
	go func() { defer bgWG.Done(); d.notes.run(bg) }()
	go func() { defer bgWG.Done(); d.summarize(bg) }()
	go func() { defer bgWG.Done(); d.guard.Run(bg) }()
	go func() {
		defer bgWG.Done()
		if err := d.pool.Run(bg); err != nil {
			d.log.Error("verify pool stopped", zap.Error(err))
		}
	}()

	d.mu.Lock()
	d.runCtx = ctx
	d.wg.Add(1)
	go func() { defer d.wg.Done(); d.sched.Run(ctx) }()
	d.startRelaysLocked(d.cfg)
	if d.cfg.Discover.Enabled {
		d.startDiscoveredLocked()
	}
	if d.cfg.NATS != nil {
		d.wg.Add(1)
		go func() { defer d.wg.Done(); d.runJobs(ctx) }()
	}
	d.mu.Unlock()

	_ = sdnotify.Ready()
	_ = sdnotify.Status("archiving")
	d.log.Info("archiver running", zap.String("listen", d.Addr()), zap.String("data", d.cfg.DataDir), zap.Int("relays", len(d.cfg.Relays)))
	if !d.store.SightingIndexReady() {
		// Correct without it, but each pass's audit then walks every
		// archived event of its range (docs/SCHEDULER.md).
		d.log.Warn("the archive's sighting index is not built: each relay's audit reads the whole archive; stop the daemon and run `archiver reprocess --index` once", zap.String("data", d.cfg.DataDir))
	}
	watchdog := d.watchdog(ctx)

	<-ctx.Done()
	_ = sdnotify.Stopping()
	stopTimeout := time.Duration(d.cfg.Limits.StopTimeout)
	d.log.Info("stopping: finishing in-flight pages and batches", zap.Duration("stop_timeout", stopTimeout))
	stopped := make(chan struct{}) // closed when nothing writes to the store any more
	go func() { d.wg.Wait(); stopBG(); bgWG.Wait(); close(stopped) }()
	var err error
	select {
	case <-stopped:
	case <-time.After(stopTimeout):
		err = fmt.Errorf("daemon: stop timeout %v passed with work still running", stopTimeout)
		d.log.Error("stop timeout passed: stopping the verify pool without waiting for the relays")
		stopBG()
	}
	<-watchdog
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = srv.Shutdown(sctx)
	cancel()
	<-srvDone
	d.stopServe(relay) // before the store closes: it reads the store
	// Pebble panics on a write after Close, so the store closes only once
	// every writer has returned. They all watch a cancelled context by
	// now; one that does not return within closeGrace is stuck (a hung
	// disk): the store is then left to the process exit, which loses
	// nothing committed (every batch is synced) and the next start
	// resumes from it.
	select {
	case <-stopped:
		if cerr := d.store.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	case <-time.After(closeGrace):
		err = errors.Join(err, fmt.Errorf("daemon: writers still running %v after the stop: archive %s left open for the process exit", closeGrace, d.cfg.DataDir))
	}
	d.log.Info("stopped")
	return err
}

// closeGrace is how long a stop that timed out still waits for the
// writers, whose contexts are cancelled, before giving up on closing the
// store.
const closeGrace = 10 * time.Second

// watchdog pings systemd from the verify pool's health: a ping goes out
// only while the pool's loop keeps turning (it turns at least every 200
// ms, idle or not). The returned channel closes when it stops.
func (d *Daemon) watchdog(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	every, ok := sdnotify.WatchdogInterval()
	if !ok {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		t := time.NewTicker(every / 2)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if time.Since(d.pool.Alive()) < every/2 {
					_ = sdnotify.Watchdog()
				} else {
					d.log.Error("verify loop stuck: withholding the systemd watchdog ping", zap.Time("last_loop", d.pool.Alive()))
				}
			}
		}
	}()
	return done
}

// Reload switches to a new configuration: relays that appeared start,
// relays that disappeared stop, the others keep running untouched.
func (d *Daemon) Reload() error {
	if d.opts.Reload == nil {
		return errors.New("daemon: no reload source")
	}
	cfg, err := d.opts.Reload()
	var auth *crawl.AuthKeys
	if err == nil {
		auth, err = cfg.AuthKeys(os.Getenv)
	}
	if err != nil {
		d.log.Error("reload refused: keeping the running configuration", zap.Error(err))
		return err
	}
	d.auth.Store(auth) // the next crawl or tail of every relay uses them
	d.metricsRelays.Store(metricsRelays(cfg))
	d.mu.Lock()
	defer d.mu.Unlock()
	want := map[string]bool{}
	for _, r := range cfg.Relays {
		want[r.URL] = true
	}
	for url, l := range d.relays {
		if !want[url] && l.found == nil { // discovered relays are not the file's to remove
			d.log.Info("relay removed from the configuration: stopping it", zap.String("relay", url))
			d.sched.Remove(url)
			delete(d.relays, url)
		}
	}
	limitsChanged := cfg.Limits != d.cfg.Limits || cfg.DataDir != d.cfg.DataDir || cfg.Listen != d.cfg.Listen
	d.warnServeReload(cfg)
	d.cfg.Relays = cfg.Relays
	if limitsChanged {
		d.log.Warn("reload: limits, data_dir and listen take effect on restart only")
	}
	var added []string
	for _, r := range cfg.Relays {
		if _, ok := d.relays[r.URL]; !ok {
			added = append(added, r.URL)
		}
	}
	if d.runCtx != nil && d.runCtx.Err() == nil { // no new relay once stopping
		d.startRelaysLocked(cfg)
	}
	if d.sweep != nil {
		d.sweep.claim(added)
	}
	d.log.Info("configuration reloaded", zap.Int("relays", len(d.relays)))
	return nil
}

func relayURLs(cfg *config.Config) []string {
	out := make([]string, len(cfg.Relays))
	for i, r := range cfg.Relays {
		out[i] = r.URL
	}
	return out
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// metricsRelays is the set of the first Limits.MetricsRelays configured
// relays.
func metricsRelays(cfg *config.Config) *map[string]bool {
	m := map[string]bool{}
	for _, r := range cfg.Relays[:min(len(cfg.Relays), cfg.Limits.MetricsRelays)] {
		m[r.URL] = true
	}
	return &m
}
