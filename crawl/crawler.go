// Package crawl archives relays: it reads each relay's NIP-11 limits, pages
// the job's created_at range newest-first with until cursors over
// WebSocket connections, completes walls (seconds holding more events than
// a page), and hands every page to the raw store together with the cursor
// it advances, so a crash re-fetches at most the pages in flight.
package crawl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nostr-archiver/archiver/adaptive"
	"github.com/nostr-archiver/archiver/nip11"
	"github.com/nostr-archiver/archiver/relayconn"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/nostr-archiver/archiver/rawstore"
	"go.uber.org/zap"
)

// Options configure a Crawler. A zero value means the default: what
// DefaultOptions holds.
type Options struct {
	Store  *rawstore.Store
	Logger *zap.Logger

	// Since and Until bound the job's created_at range (inclusive). Until
	// 0 means "now" at the job's first run; later runs of the same open
	// job extend it to the new "now".
	Since, Until int64
	Kinds        []int // optional job filter
	// Authors, optional too, are lowercase hex pubkeys, at most
	// MaxAuthors (a REQ names them all). A crawl's cursors belong to its
	// range and filter: another filter over the same range starts afresh.
	Authors []string

	PageLimit          int // REQ limit; default: NIP-11 max_limit, else 500
	MaxPageLimit       int // ceiling on PageLimit
	MaxConns           int // connections across all relays
	MaxConnsPerRelay   int // connections to one relay
	MaxInFlightPerConn int // REQs in flight on one connection
	// StartConns x StartInFlight is where each relay's controller starts
	// before it learns what the relay sustains.
	StartConns, StartInFlight int
	Shards                    int           // initial shards of a job
	PageTimeout               time.Duration // idle time before a page is given up
	// LateLinger is the most a page waits after its EOSE for events of a
	// relay caught sending them after it: from 20 ms, doubled while they
	// still come later (negative: pages never wait).
	LateLinger             time.Duration
	DialTimeout            time.Duration // TCP + TLS + upgrade
	MaxFrame               int           // largest frame accepted
	MaxAttempts            int           // consecutive failures of one page (or first dial) before giving up
	BackoffMin, BackoffMax time.Duration // retry backoff range
	HTTPClient             *http.Client  // for NIP-11; default a client with a 10s timeout

	// ConnLimiter, if set, is the MaxConns budget shared with other
	// crawlers (the daemon runs one per relay); else the crawler has its own.
	ConnLimiter *semaphore.Weighted
	// Pause, if set, is called before every REQ and every tail commit and
	// blocks while crawling must wait (e.g. the disk is nearly full); it
	// returns ctx's error if ctx ends meanwhile.
	Pause func(ctx context.Context) error
	// Metrics, if set, receives the crawl's metrics (see NewMetrics).
	Metrics *Metrics
	// OnConnLimit, if set, is called when a relay refuses a connection
	// with HTTP 429 (a per-address connection or rate limit): the daemon
	// stops its live tail of the relay, which holds a connection. It may
	// block until that connection is closed.
	OnConnLimit func()
	// OnCommit is called after each batch is durable (e.g. to wake the
	// verify pool). It must not block.
	OnCommit func()
	// Now is the clock; default time.Now.
	Now func() time.Time
	// SkipReadBack leaves the ranges an earlier run paged unread (see
	// readBackEarlier): for a caller that read them back already in this
	// process (the daemon's later passes of a relay). A crawl that skips it
	// trusts the archive's bodies in those ranges.
	SkipReadBack bool
	// Recheck checks the job's range below what this run plans (what
	// earlier runs paged) against the relay's NIP-77 or COUNT again, and
	// pages again where the relay now holds events the archive lacks:
	// events published with an old created_at while no tail was
	// connected. For the daemon's periodic recheck and `crawl --recheck`.
	Recheck bool
	// RecheckByPaging has Recheck page the range again where the relay
	// answers neither NIP-77 nor COUNT (else it checks nothing there): the
	// only way to find what such a relay was sent since, at the cost of a
	// crawl. For `crawl --recheck`, which a user asks for.
	RecheckByPaging bool
	// AuthKeys, if set, answer NIP-42 challenges of the relays that ask
	// (see auth.go); a relay without a key is never authenticated to.
	AuthKeys *AuthKeys
	// Dialer, if set, opens the TCP connections (relayconn.DialOptions.NetDial).
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// jitter, if set, picks each backoff in [d/2, d] (relayconn.Backoff):
	// tests fix it to assert the exact schedule.
	jitter func(d time.Duration) time.Duration
}

// pingInterval keeps NAT and proxies from dropping a quiet connection.
const pingInterval = 30 * time.Second

// dialOptions are the options of every connection the crawler opens.
func (o *Options) dialOptions() relayconn.DialOptions {
	return relayconn.DialOptions{MaxFrame: o.MaxFrame, DialTimeout: o.DialTimeout, PingInterval: pingInterval, NetDial: o.Dialer}
}

// DefaultOptions holds the crawl's defaults, the one source of them: the
// CLI's flags, the daemon's configuration (package config) and the job
// workers all start from here.
func DefaultOptions() Options {
	return Options{
		MaxPageLimit:       5000,
		MaxConns:           64,
		MaxConnsPerRelay:   4,
		MaxInFlightPerConn: 8,
		StartConns:         1,
		StartInFlight:      4,
		Shards:             32,
		PageTimeout:        15 * time.Second,
		LateLinger:         2 * time.Second,
		DialTimeout:        10 * time.Second,
		MaxFrame:           8 << 20,
		MaxAttempts:        8,
		BackoffMin:         250 * time.Millisecond,
		BackoffMax:         30 * time.Second,
	}
}

func (o *Options) setDefaults() {
	d := DefaultOptions()
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	for _, f := range []struct{ v, def *int }{
		{&o.MaxPageLimit, &d.MaxPageLimit}, {&o.MaxConns, &d.MaxConns}, {&o.MaxConnsPerRelay, &d.MaxConnsPerRelay},
		{&o.MaxInFlightPerConn, &d.MaxInFlightPerConn}, {&o.StartConns, &d.StartConns}, {&o.StartInFlight, &d.StartInFlight},
		{&o.Shards, &d.Shards}, {&o.MaxFrame, &d.MaxFrame}, {&o.MaxAttempts, &d.MaxAttempts},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	for _, f := range []struct{ v, def *time.Duration }{
		{&o.PageTimeout, &d.PageTimeout}, {&o.DialTimeout, &d.DialTimeout}, {&o.LateLinger, &d.LateLinger},
		{&o.BackoffMin, &d.BackoffMin}, {&o.BackoffMax, &d.BackoffMax},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if o.HTTPClient == nil {
		// One request per relay per run: keeping the connection idle
		// would only leave a goroutine behind.
		// Through the Dialer too: a guard that refuses private addresses
		// must see the NIP-11 request as well as the WebSocket.
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DisableKeepAlives: true, Proxy: http.ProxyFromEnvironment, DialContext: o.Dialer,
		}}
	}
	if o.Pause == nil {
		o.Pause = func(context.Context) error { return nil }
	}
	if o.OnCommit == nil {
		o.OnCommit = func() {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(prometheus.NewRegistry()) // counted, not exported
	}
}

// Check reports the first bad option of o with its defaults applied,
// without a Store: a command checks its flags with it before it creates
// anything.
func (o Options) Check() error {
	o.setDefaults()
	return o.Validate()
}

// Validate reports the first bad option (New also requires a Store).
func (o *Options) Validate() error {
	switch {
	case o.Since < 0:
		return fmt.Errorf("crawl: since %d < 0", o.Since)
	case o.Until != 0 && o.Until < o.Since:
		return fmt.Errorf("crawl: until %d before since %d", o.Until, o.Since)
	case o.PageLimit < 0 || o.PageLimit > o.MaxPageLimit:
		return fmt.Errorf("crawl: page limit %d outside [1,%d]", o.PageLimit, o.MaxPageLimit)
	case o.MaxInFlightPerConn < 1:
		return fmt.Errorf("crawl: in-flight REQs per connection %d < 1", o.MaxInFlightPerConn)
	case o.MaxConnsPerRelay < 1 || o.MaxConns < 1:
		return fmt.Errorf("crawl: connection caps %d per relay, %d total: want >= 1", o.MaxConnsPerRelay, o.MaxConns)
	case o.Shards < 1:
		return fmt.Errorf("crawl: shards %d < 1", o.Shards)
	case o.MaxFrame < 1<<10:
		return fmt.Errorf("crawl: max frame %d < 1 KiB", o.MaxFrame)
	case o.BackoffMin <= 0 || o.BackoffMax < o.BackoffMin:
		return fmt.Errorf("crawl: backoff [%v,%v] is not a range", o.BackoffMin, o.BackoffMax)
	case len(o.Authors) > MaxAuthors:
		return fmt.Errorf("crawl: %d authors, more than %d", len(o.Authors), MaxAuthors)
	}
	for _, k := range o.Kinds {
		if k < 0 || k > 65535 {
			return fmt.Errorf("crawl: kind %d outside [0,65535]", k)
		}
	}
	for _, a := range o.Authors {
		if !ValidAuthor(a) {
			return fmt.Errorf("crawl: author %q: want 64 lowercase hex digits", a)
		}
	}
	return nil
}

// MaxAuthors bounds a crawl's author filter: 1000 pubkeys make a 66 KB
// REQ, half of strfry's default maximum message.
const MaxAuthors = 1000

// ValidAuthor reports whether s names an author as filters do: a pubkey
// in 64 lowercase hex digits.
func ValidAuthor(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Crawler archives relays.
type Crawler struct {
	opts  Options
	conns *semaphore.Weighted // MaxConns across relays

	mu     sync.Mutex
	active map[string]*relayCrawl // for Progress
}

// Progress is one relay's crawl so far.
type Progress struct {
	Relay        string
	Events       int64   // EVENT copies received
	ShardsDone   int     // shards paged to their end
	ShardsTotal  int     // shards of the job (work stealing adds some)
	EstRemaining float64 // events estimated left, from the density learned so far
}

// Progress reports every relay being crawled.
func (c *Crawler) Progress() []Progress {
	c.mu.Lock()
	rs := make([]*relayCrawl, 0, len(c.active))
	for _, r := range c.active {
		rs = append(rs, r)
	}
	c.mu.Unlock()
	out := make([]Progress, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.progress())
	}
	return out
}

// New validates opts and returns a Crawler.
func New(opts Options) (*Crawler, error) {
	if opts.Store == nil {
		return nil, errors.New("crawl: Store is required")
	}
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := &Crawler{opts: opts, conns: opts.ConnLimiter, active: map[string]*relayCrawl{}}
	if c.conns == nil {
		c.conns = semaphore.NewWeighted(int64(opts.MaxConns))
	}
	return c, nil
}

// acquireConn takes one of the MaxConns connection slots. A relay's first
// connection waits for one; extra connections only take a free one, so
// that one relay cannot starve the others.
func (c *Crawler) acquireConn(ctx context.Context, first bool) error {
	if first {
		return c.conns.Acquire(ctx, 1)
	}
	if !c.conns.TryAcquire(1) {
		return errors.New("total connection cap reached")
	}
	return nil
}

func (c *Crawler) releaseConn() { c.conns.Release(1) }

// newController builds a relay's concurrency controller from the user's
// caps and the relay's NIP-11 priors; its decisions are logged.
func (c *Crawler) newController(doc *nip11.Document, r *relayCrawl) (*adaptive.Controller, error) {
	cfg := adaptive.DefaultConfig()
	cfg.MaxConns, cfg.MaxInflightPerConn = c.opts.MaxConnsPerRelay, c.opts.MaxInFlightPerConn
	cfg.StartConns, cfg.StartInflightPerConn = min(c.opts.StartConns, cfg.MaxConns), min(c.opts.StartInFlight, cfg.MaxInflightPerConn)
	cfg.PageLimit = r.limit
	if doc != nil {
		// One subscription stays free for wall sub-queries and COUNT.
		if n := doc.Limitation.MaxSubscriptions; n > 0 {
			cfg.MaxSubscriptions = max(1, n-1)
		}
		cfg.MaxLimit = doc.Limitation.MaxLimit
	}
	cfg.OnChange = func(ch adaptive.Change) {
		r.log.Info("concurrency", zap.String("change", ch.String()), zap.Int("conns", ch.Conns), zap.Int("inflight_per_conn", ch.Inflight))
		r.metrics.targetConns.Set(float64(ch.Conns))
		r.metrics.targetInflight.Set(float64(ch.Inflight))
	}
	ctrl, err := adaptive.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("controller for %s: %w", r.url, err)
	}
	conns, inflight := ctrl.Target()
	r.metrics.targetConns.Set(float64(conns))
	r.metrics.targetInflight.Set(float64(inflight))
	return ctrl, nil
}

// Finish reasons of a relay's crawl.
const (
	FinishDrained         = "drained"          // every shard paged to its end, every wall completed
	FinishIncompleteWalls = "incomplete-walls" // drained, but some second could not be completed
	FinishAuthRequired    = "auth-required"    // the relay wants NIP-42 AUTH before it serves
	FinishUnpageable      = "unpageable"       // the relay ignores until: newest-first paging cannot advance
	FinishUnreachable     = "unreachable"      // could not connect
	FinishGaveUp          = "gave-up"          // a page failed MaxAttempts times in a row
	FinishRefused         = "refused"          // CLOSED blocked:/restricted:
	FinishCanceled        = "canceled"         // stopped by the caller (resumes next run)
	FinishUnproven        = "unproven"         // paged to the end, but the relay's COUNT says it holds more than it served
	FinishRestricted      = "restricted"       // CLOSED restricted: (after AUTH, the key is not one the relay serves)
	FinishAuthRejected    = "auth-rejected"    // the relay answered our NIP-42 AUTH with OK false
	FinishDamaged         = "damaged"          // paged to the end, but stored events of the relay cannot be read back, and it did not serve them again
)

// Result is one relay's outcome.
type Result struct {
	Relay  string
	Finish string // one of the Finish* constants
	Detail string // the cause, for anything but drained
	// Proof is, for a drained relay, the weakest proof among the ranges
	// this run audited (ProofPaged, ProofCount or ProofNIP77); empty when
	// the run audited none.
	Proof string
}

// Drained reports whether the relay was archived completely.
func (r Result) Drained() bool { return r.Finish == FinishDrained }

func (r Result) String() string {
	if r.Detail == "" {
		if p, ok := proofText[r.Proof]; ok && r.Drained() {
			return r.Relay + ": " + r.Finish + ", " + p
		}
		return r.Relay + ": " + r.Finish
	}
	return r.Relay + ": " + r.Finish + ": " + r.Detail
}

// proofText says how a drained relay's ranges were proven.
var proofText = map[string]string{
	ProofPaged: "paged to the end (no exact COUNT or NIP-77 to check it by)",
	ProofCount: "every range checked against the relay's COUNT",
	ProofNIP77: "every range reconciled over NIP-77",
}

// Run crawls every relay concurrently and returns one Result per relay, in
// the order given. One slow or hostile relay never holds up the others.
func (c *Crawler) Run(ctx context.Context, relays []string) []Result {
	out := make([]Result, len(relays))
	var wg sync.WaitGroup
	for i, raw := range relays {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url, err := NormalizeURL(raw)
			if err != nil {
				out[i] = Result{Relay: raw, Finish: FinishUnreachable, Detail: err.Error()}
				return
			}
			out[i] = c.crawlRelay(ctx, url)
		}()
	}
	wg.Wait()
	return out
}
