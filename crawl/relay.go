package crawl

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nostr-archiver/archiver/nip11"
	"github.com/nostr-archiver/archiver/rawstore"
	"go.uber.org/zap"
)

// RelayRecord is the crawl's persistent per-relay record (rawstore's N
// key), what `archiver stats` shows per relay.
type RelayRecord struct {
	Pages          int64             `json:"pages"`
	OutOfRange     int64             `json:"out_of_range"`
	Refusals       map[string]int64  `json:"refusals,omitempty"`
	Reconnects     int64             `json:"reconnects"`
	EffectiveLimit int               `json:"effective_limit"`
	RequestedLimit int               `json:"requested_limit"`
	Finish         string            `json:"finish,omitempty"`
	FinishDetail   string            `json:"finish_detail,omitempty"`
	FinishedAt     int64             `json:"finished_at,omitempty"`
	Walls          []WallReport      `json:"walls,omitempty"`
	NIP11          *nip11.Limitation `json:"nip11,omitempty"`
	UnknownLabels  map[string]int    `json:"unknown_labels,omitempty"`
}

// WallReport records one second that held more events than a page.
type WallReport struct {
	Second   int64    `json:"second"`
	Events   int      `json:"events"`   // distinct ids fetched for that second
	Complete bool     `json:"complete"` // every sub-query came back short (and COUNT agreed, if asked)
	Method   string   `json:"method"`
	Count    int64    `json:"count,omitempty"` // the relay's NIP-45 COUNT for that second, if it answers
	Unsplit  []string `json:"unsplit,omitempty"`
}

// relayCrawl is the state of one relay's crawl.
type relayCrawl struct {
	c     *Crawler
	url   string
	idx   uint32
	log   *zap.Logger
	limit int // requested page limit
	count bool

	conns *connPool

	mu  sync.Mutex // guards rec, finish; serializes commits
	rec RelayRecord

	finishOnce sync.Once
	finish     Result
	cancel     context.CancelFunc
}

func (c *Crawler) crawlRelay(ctx context.Context, url string) Result {
	log := c.opts.Logger.With(zap.String("relay", url))
	idx, err := c.opts.Store.RelayIndex(url)
	if err != nil {
		return Result{Relay: url, Finish: FinishGaveUp, Detail: err.Error()}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &relayCrawl{c: c, url: url, idx: idx, log: log, cancel: cancel}
	if err := r.loadRecord(); err != nil {
		return Result{Relay: url, Finish: FinishGaveUp, Detail: err.Error()}
	}
	r.rec.Finish, r.rec.FinishDetail = "", ""

	doc, err := nip11.Fetch(ctx, c.opts.HTTPClient, url)
	if err != nil {
		log.Info("no NIP-11 document; using defaults", zap.Error(err))
	} else {
		r.rec.NIP11 = &doc.Limitation
		r.count = doc.Supports(45)
	}
	r.limit = c.pageLimit(doc)
	r.rec.RequestedLimit = r.limit
	r.conns = newConnPool(r)
	defer r.conns.close()

	job, err := r.loadJob()
	if err != nil {
		return Result{Relay: url, Finish: FinishGaveUp, Detail: err.Error()}
	}
	log.Info("crawl starting", zap.Int64("since", job.meta.Since), zap.Int64("until", job.meta.Until),
		zap.Int("shards", len(job.shards)), zap.Int("limit", r.limit))

	var wg sync.WaitGroup
	next := make(chan *shardState, len(job.shards))
	for _, s := range job.shards {
		if !s.Done {
			next <- s
		}
	}
	close(next)
	for range c.opts.MaxInFlightPerConn {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range next {
				if ctx.Err() != nil {
					return
				}
				r.pageShard(ctx, job, s)
			}
		}()
	}
	wg.Wait()

	res := r.result(ctx, job)
	r.mu.Lock()
	r.rec.Finish, r.rec.FinishDetail, r.rec.FinishedAt = res.Finish, res.Detail, c.opts.Now().Unix()
	r.rec.UnknownLabels = r.conns.unknownLabels()
	r.mu.Unlock()
	if err := r.commit(nil, nil, nil); err != nil {
		log.Error("could not record finish", zap.Error(err))
	}
	log.Info("crawl finished", zap.String("finish", res.Finish), zap.String("detail", res.Detail))
	return res
}

func (c *Crawler) pageLimit(doc *nip11.Document) int {
	switch {
	case c.opts.PageLimit > 0:
		return c.opts.PageLimit
	case doc != nil && doc.Limitation.MaxLimit > 0:
		return min(doc.Limitation.MaxLimit, c.opts.MaxPageLimit)
	}
	return min(500, c.opts.MaxPageLimit)
}

// result decides the relay's finish reason once every worker stopped.
func (r *relayCrawl) result(ctx context.Context, job *jobState) Result {
	if res, ok := r.finished(); ok {
		return res
	}
	if ctx.Err() != nil {
		return Result{Relay: r.url, Finish: FinishCanceled, Detail: "stopped before the relay was drained; the next run resumes"}
	}
	for _, s := range job.shards {
		if !s.Done {
			return Result{Relay: r.url, Finish: FinishGaveUp, Detail: fmt.Sprintf("shard %s not finished", s.ID)}
		}
	}
	if err := r.finishJob(job); err != nil {
		return Result{Relay: r.url, Finish: FinishGaveUp, Detail: err.Error()}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var incomplete []int64
	for _, w := range r.rec.Walls {
		if !w.Complete {
			incomplete = append(incomplete, w.Second)
		}
	}
	if len(incomplete) > 0 {
		return Result{Relay: r.url, Finish: FinishIncompleteWalls, Detail: fmt.Sprintf("seconds %v hold events the relay would not split", incomplete)}
	}
	return Result{Relay: r.url, Finish: FinishDrained}
}

// fail ends the relay's crawl with a terminal reason (the first one wins).
func (r *relayCrawl) fail(finish, detail string) {
	r.finishOnce.Do(func() {
		r.mu.Lock()
		r.finish = Result{Relay: r.url, Finish: finish, Detail: detail}
		r.mu.Unlock()
		r.log.Warn("relay crawl stopping", zap.String("finish", finish), zap.String("detail", detail))
		r.cancel()
	})
}

func (r *relayCrawl) finished() (Result, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.finish, r.finish.Finish != ""
}

func (r *relayCrawl) loadRecord() error {
	rels, err := r.c.opts.Store.Relays()
	if err != nil {
		return err
	}
	for _, rel := range rels {
		if rel.Index == r.idx && len(rel.Record) > 0 {
			if err := json.Unmarshal(rel.Record, &r.rec); err != nil {
				return fmt.Errorf("relay record of %s: %w", r.url, err)
			}
		}
	}
	return nil
}

func (r *relayCrawl) refusal(kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rec.Refusals == nil {
		r.rec.Refusals = map[string]int64{}
	}
	r.rec.Refusals[kind]++
}

// commit stores items and malformed copies with the shard's new state and
// the relay record in one atomic batch.
func (r *relayCrawl) commit(items []Item, malformed []rawstore.Malformed, shard *shardState) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := &rawstore.Batch{Relay: r.idx, Malformed: malformed}
	if len(items) > 0 {
		b.Events = make([]rawstore.Copy, len(items))
		for i, it := range items {
			b.Events[i] = rawstore.Copy{ID: it.ID, Raw: it.Raw}
		}
	}
	if shard != nil {
		b.Shards = map[string][]byte{shard.key: shard.encode()}
	}
	rec, err := json.Marshal(&r.rec)
	if err != nil {
		return err
	}
	b.RelayRecord = rec
	if _, err := r.c.opts.Store.Ingest(b); err != nil {
		return err
	}
	r.c.opts.OnCommit()
	return nil
}

// backoff sleeps for the attempt-th retry: exponential with full jitter.
func (r *relayCrawl) backoff(ctx context.Context, attempt int) error {
	d := r.c.opts.BackoffMin << min(attempt, 16)
	d = min(d, r.c.opts.BackoffMax)
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// connPool hands out the relay's connection, dialing (with backoff) when
// there is none. One connection per relay for now; concurrency on it is
// bounded by the number of paging workers.
type connPool struct {
	r       *relayCrawl
	mu      sync.Mutex
	conn    *Conn
	unknown map[string]int
}

func newConnPool(r *relayCrawl) *connPool { return &connPool{r: r} }

var errUnreachable = errors.New("unreachable")

func (p *connPool) get(ctx context.Context) (*Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		select {
		case <-p.conn.Done():
			p.retire(p.conn)
		default:
			return p.conn, nil
		}
	}
	o := p.r.c.opts
	var last error
	for attempt := 0; attempt < o.MaxAttempts; attempt++ {
		if attempt > 0 {
			if err := p.r.backoff(ctx, attempt); err != nil {
				return nil, err
			}
		}
		c, err := Dial(ctx, p.r.url, DialOptions{MaxFrame: o.MaxFrame, DialTimeout: o.DialTimeout, PingInterval: 30 * time.Second})
		if err == nil {
			p.conn = c
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		last = err
		if permanentDialError(err) {
			break
		}
		kind := "dial-error"
		if errors.Is(err, ErrTooManyRequests) {
			kind = "http-429"
		}
		p.r.refusal(kind)
		p.r.log.Warn("connect failed", zap.Int("attempt", attempt+1), zap.Error(err))
	}
	return nil, fmt.Errorf("%w: %v", errUnreachable, last)
}

// permanentDialError reports errors no retry can fix: the endpoint does
// not speak TLS, or its certificate is not valid for it.
func permanentDialError(err error) bool {
	var rh tls.RecordHeaderError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &rh) || errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid)
}

// drop closes c if it is still the pool's connection (after a timeout or
// loss), so the next get dials afresh.
func (p *connPool) drop(c *Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == c {
		p.retire(c)
		p.r.mu.Lock()
		p.r.rec.Reconnects++
		p.r.mu.Unlock()
	}
}

func (p *connPool) retire(c *Conn) {
	c.Close()
	for k, v := range c.UnknownLabels() {
		if p.unknown == nil {
			p.unknown = map[string]int{}
		}
		p.unknown[k] += v
	}
	p.conn = nil
}

// unknownLabels merges the unknown frame labels of every connection so far.
func (p *connPool) unknownLabels() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out map[string]int
	add := func(m map[string]int) {
		for k, v := range m {
			if out == nil {
				out = map[string]int{}
			}
			out[k] += v
		}
	}
	add(p.unknown)
	if p.conn != nil {
		add(p.conn.UnknownLabels())
	}
	return out
}

func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		p.retire(p.conn)
	}
}
