package crawl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nostr-archiver/archiver/adaptive"
	"github.com/nostr-archiver/archiver/relayconn"
	"github.com/nostr-archiver/archiver/shard"

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
	PlannedBy      string            `json:"planned_by,omitempty"` // how the last plan sized shards: count (NIP-45), probe (limit-1 REQs found which slices hold events) or uniform
	RequestedLimit int               `json:"requested_limit"`
	Finish         string            `json:"finish,omitempty"`
	FinishDetail   string            `json:"finish_detail,omitempty"`
	FinishedAt     int64             `json:"finished_at,omitempty"`
	Walls          []WallReport      `json:"walls,omitempty"`
	NIP11          *nip11.Limitation `json:"nip11,omitempty"`
	UnknownLabels  map[string]int    `json:"unknown_labels,omitempty"`
	Auths          int64             `json:"auths,omitempty"` // NIP-42 AUTHs the relay accepted (the key itself is never stored)
	// Bounds is how the relay reads since and until when not as NIP-01
	// says (both inclusive): the crawl asks it one second wider.
	Bounds string `json:"bounds,omitempty"`
	// Lies are the ways the relay was caught serving pages that are not
	// a range's newest events (by kind: over-limit, empty-early). Paging
	// proves no range of such a relay: only COUNT or NIP-77 can. Kept
	// across runs: a relay shown to lie stays untrusted.
	Lies map[string]string `json:"lies,omitempty"`
	// Repage is what was paged by trusting that the relay sends a range's
	// newest events, before it was caught not doing so: paged again in
	// windows before the audit (kept until then, across runs).
	Repage []Span `json:"repage,omitempty"`
	// Unconfirmed is what the crawl moved past on the answers of a relay
	// caught sending events after their page's EOSE (empty ones each time
	// it was asked, see emptyRetries), with the events they showed: the
	// rest may yet come. Before the audit and after it, a range the
	// archive then holds more events of is paged again (lateInAnswers);
	// kept until the crawl of the relay ends, across runs. (The JSON name
	// is from when only empty answers were kept.)
	Unconfirmed []Span `json:"unconfirmed_empty,omitempty"`

	// Coverage says, per range of the last run, how it was proven held
	// (paged to the end, COUNT-checked) or why not.
	Coverage []RangeCoverage `json:"coverage,omitempty"`

	// NIP-77: what the relay did with it ("ok", or why it refused), the
	// record cap a NEG-ERR blocked: named, or the size of a set the relay
	// cut short (either sizes the next first windows),
	// and the ranges proven complete by reconciliation.
	NIP77     string     `json:"nip77,omitempty"`
	NegCap    int        `json:"neg_cap,omitempty"`
	NegProofs []NegProof `json:"neg_proofs,omitempty"`
}

// NegProof says the archive held every event the relay had in [Since,
// Until] (Until -1: no upper bound) when reconciled over NIP-77 at At.
type NegProof struct {
	Since int64 `json:"since"`
	Until int64 `json:"until"`
	At    int64 `json:"at"`
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
	nip77 bool // NIP-11 lists 77: negWall may finish a wall REQ could not
	conns *connPool
	// bounds is how the relay reads since and until (learnBounds, before
	// any shard is planned); guarded by mu.
	bounds  bounds
	metrics *relayMetrics
	// lateRounds counts repageLate's rounds that stored no new event;
	// only result, once every worker stopped, uses it.
	lateRounds int
	// fresh counts the events commits stored for the first time.
	fresh   atomic.Int64
	started time.Time // the crawl's clock when this run began
	// countCap is the lowest COUNT the relay answered for a range it then
	// served more of (countCapAt): its cap, if it counts a capped query.
	countCap atomic.Int64

	mu      sync.Mutex // guards everything below; never held across a commit (see commit)
	rec     RelayRecord
	job     *jobState
	queue   *shard.Queue
	density *shard.Density
	ctrl    *adaptive.Controller
	running int   // shards being paged
	events  int64 // EVENT copies received
	// shardsDirty: a steal split a shard; the next commit persists every
	// shard's state.
	shardsDirty bool
	// tallies keep what the COUNT audit needs of each shard's paging.
	tallies map[string]*tally
	// pagesByUntil counts the pages paged by until (orderCheckDue).
	pagesByUntil int
	known        knownAuthors
	// workerDone wakes the scheduler when a worker stops.
	workerDone chan struct{}

	finishOnce sync.Once
	finish     Result
	cancel     context.CancelFunc
	// sizeOnce asks for one page to learn the relay's page size
	// (secondFull).
	sizeOnce sync.Once
	// occupied is what the plan's probes found holding events (none if
	// the job was planned otherwise, or by an earlier run); written
	// before the workers start.
	occupied occupancy
	// unchecked holds the released shards' unchecked last full pages
	// (keepUnchecked); guarded by mu.
	unchecked map[string]uncheckedPage
	// linger is how long a page of a relay caught sending events after
	// their page's EOSE waits for them (lingerFor); 0 until raised.
	linger time.Duration
}

func (c *Crawler) crawlRelay(ctx context.Context, url string) Result {
	log := c.opts.Logger.With(zap.String("relay", url))
	idx, err := c.opts.Store.RelayIndex(url)
	if err != nil {
		return Result{Relay: url, Finish: FinishGaveUp, Detail: err.Error()}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &relayCrawl{c: c, url: url, idx: idx, log: log, cancel: cancel, density: &shard.Density{}, started: c.opts.Now(),
		tallies: map[string]*tally{}, known: knownAuthors{},
		workerDone: make(chan struct{}, 1), metrics: c.opts.Metrics.forRelay(url)}
	if err := r.loadRecord(); err != nil {
		return Result{Relay: url, Finish: FinishGaveUp, Detail: err.Error()}
	}
	r.rec.Finish, r.rec.FinishDetail = "", ""
	// Learned afresh each run: a record from before fullness counted
	// distinct ids may hold a size inflated by duplicate frames.
	r.rec.EffectiveLimit = 0

	doc, err := nip11.Fetch(ctx, c.opts.HTTPClient, url)
	if err != nil {
		log.Info("no NIP-11 document; using defaults", zap.Error(err))
	} else {
		r.rec.NIP11 = &doc.Limitation
		r.count = doc.Supports(45)
		r.nip77 = doc.Supports(77)
	}
	r.limit = c.pageLimit(doc)
	r.rec.RequestedLimit = r.limit
	if r.ctrl, err = c.newController(doc, r); err != nil {
		return Result{Relay: url, Finish: FinishGaveUp, Detail: err.Error()}
	}
	r.conns = newConnPool(r)
	defer r.conns.close()
	r.rec.Bounds = ""
	r.learnBounds(ctx)

	job, shards, err := r.loadJob(ctx)
	if err == nil {
		r.job = job
		r.queue, err = shard.NewQueue(shards, r.density, float64(r.limit))
	}
	if err != nil {
		return Result{Relay: url, Finish: FinishGaveUp, Detail: err.Error()}
	}
	log.Info("crawl starting", zap.Int64("since", job.meta.Since), zap.Int64("until", job.meta.Until),
		zap.Int("shards", len(shards)), zap.Int("limit", r.limit))
	c.mu.Lock()
	c.active[url] = r
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.active, url)
		c.mu.Unlock()
	}()
	r.schedule(ctx)

	res := r.result(ctx)
	r.mu.Lock()
	r.rec.Finish, r.rec.FinishDetail, r.rec.FinishedAt = res.Finish, res.Detail, c.opts.Now().Unix()
	r.rec.UnknownLabels = r.conns.unknownLabels()
	r.mu.Unlock()
	if _, err := r.commit(nil, nil, nil); err != nil {
		log.Error("could not record finish", zap.Error(err))
	}
	log.Info("crawl finished", zap.String("finish", res.Finish), zap.String("detail", res.Detail))
	r.metrics.finish(res.Finish)
	return res
}

// schedule runs shard workers, as many as the controller's target allows
// (connections x in-flight REQs), handing each a shard from the queue
// (which splits the largest running shard when none is pending), until
// the queue is drained, the crawl fails, or ctx ends.
func (r *relayCrawl) schedule(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		r.mu.Lock()
		conns, inflight := r.ctrl.Target()
		for r.running < conns*inflight {
			s, ok := r.queue.Next()
			if !ok {
				break
			}
			// A steal changed two shards: the next commit persists every
			// shard's state (the one below unless a worker's comes first).
			r.shardsDirty = true
			r.running++
			wg.Add(1)
			go func() {
				defer wg.Done()
				if !r.work(ctx, s) {
					r.mu.Lock()
					r.running--
					r.mu.Unlock()
				}
				select {
				case r.workerDone <- struct{}{}:
				default:
				}
			}()
		}
		idle, dirty := r.running == 0, r.shardsDirty
		r.mu.Unlock()
		if dirty {
			if _, err := r.commit(nil, nil, nil); err != nil {
				r.fail(FinishGaveUp, "store: "+err.Error())
				return
			}
		}
		if idle {
			return // nothing running and nothing to hand out: drained
		}
		select {
		case <-ctx.Done():
		case <-r.workerDone:
		case <-time.After(500 * time.Millisecond): // the target may have grown
		}
	}
}

func (r *relayCrawl) progress() Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := Progress{Relay: r.url, Events: r.events}
	for _, s := range r.queue.Shards() {
		p.ShardsTotal++
		if s.Done() {
			p.ShardsDone++
		} else {
			p.EstRemaining += r.density.Estimate(s.Since, r.densityTop(s.Cursor, s.Since))
		}
	}
	return p
}

// target is the controller's current connection and per-connection
// in-flight target.
func (r *relayCrawl) target() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctrl.Target()
}

// yield reports whether a worker should hand its shard back because the
// controller lowered the target below the number running; a worker told
// to yield has left the running count.
func (r *relayCrawl) yield() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	conns, inflight := r.ctrl.Target()
	if r.running > conns*inflight {
		r.running-- // now, so that only the surplus yields
		return true
	}
	return false
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
func (r *relayCrawl) result(ctx context.Context) Result {
	if res, ok := r.finished(); ok {
		return res
	}
	if ctx.Err() != nil {
		return r.canceled()
	}
	r.mu.Lock()
	if !r.queue.Done() {
		r.mu.Unlock()
		return Result{Relay: r.url, Finish: FinishGaveUp, Detail: "shards left unfinished"}
	}
	r.mu.Unlock()
	// Every shard is paged: what was paged trusting an order the relay
	// was caught not keeping is paged again, walls not yet proven get
	// another try with every author the crawl has seen, then each range
	// is checked against the relay's COUNT.
	failed := func(err error) Result {
		if ctx.Err() != nil {
			return r.canceled()
		}
		if res, ok := r.finished(); ok {
			return res
		}
		return Result{Relay: r.url, Finish: FinishGaveUp, Detail: err.Error()}
	}
	if err := r.repageLate(ctx); err != nil {
		return failed(err)
	}
	damaged := r.readBackEarlier(ctx)
	r.retryWalls(ctx)
	coverage := r.audit(ctx)
	r.storeLate(r.conns.takeLate())
	if r.repagePending() || r.lateInAnswers() {
		// Events that came after their EOSE, stored only now, caught the
		// relay after the audit, or came for a range the crawl took for
		// empty: that is paged again, and the audit, which took paging
		// for proof, is done again.
		if err := r.repageLate(ctx); err != nil {
			return failed(err)
		}
		coverage = r.audit(ctx)
	}
	if res, ok := r.finished(); ok {
		return res
	}
	if ctx.Err() != nil {
		return r.canceled()
	}
	r.mu.Lock()
	// Empty answers no late event contradicted are what paging says of
	// their ranges: no proof on such a relay (the coverage says so).
	r.rec.Unconfirmed = nil
	if coverage != nil {
		r.rec.Coverage = mergeCoverage(r.rec.Coverage, coverage)
	}
	r.job.meta.Done = true
	meta := map[string][]byte{r.job.key: r.job.encode()}
	r.mu.Unlock()
	// Every worker has stopped: nothing else writes this relay's states.
	if _, err := r.c.opts.Store.Ingest(&rawstore.Batch{Relay: r.idx, Shards: meta}); err != nil {
		return Result{Relay: r.url, Finish: FinishGaveUp, Detail: err.Error()}
	}
	if damaged != "" {
		return Result{Relay: r.url, Finish: FinishDamaged, Detail: damaged}
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
		return Result{Relay: r.url, Finish: FinishIncompleteWalls, Detail: fmt.Sprintf("seconds %v could not be completed or proven complete (see the walls in stats)", incomplete)}
	}
	var unproven []string
	for _, c := range JoinCoverage(r.rec.Coverage) {
		if c.Proof == ProofUnproven {
			unproven = append(unproven, fmt.Sprintf("[%d, %s]: %s", c.Since, untilText(c.Until), c.Why))
		}
	}
	if len(unproven) > 0 {
		return Result{Relay: r.url, Finish: FinishUnproven, Detail: strings.Join(unproven, "; ")}
	}
	return Result{Relay: r.url, Finish: FinishDrained, Proof: weakestProof(r.rec.Coverage)}
}

// canceled is the result of a crawl stopped from outside.
func (r *relayCrawl) canceled() Result {
	return Result{Relay: r.url, Finish: FinishCanceled, Detail: "stopped before the relay was drained; the next run resumes"}
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
	rec, err := loadRelayRecord(r.c.opts.Store, r.idx)
	r.rec = rec
	return err
}

// refusal counts a refused or failed page and tells the controller.
func (r *relayCrawl) refusal(kind string, signal adaptive.Refusal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rec.Refusals == nil {
		r.rec.Refusals = map[string]int64{}
	}
	r.rec.Refusals[kind]++
	r.metrics.refusal(kind)
	if signal != 0 {
		r.ctrl.Refused(r.c.opts.Now(), signal)
	}
}

// refusedDial records a failed connection attempt.
func (r *relayCrawl) refusedDial(err error) {
	if errors.Is(err, relayconn.ErrTooManyRequests) {
		r.refusal("http-429", adaptive.HTTP429)
		if r.c.opts.OnConnLimit != nil {
			r.c.opts.OnConnLimit()
		}
	} else {
		r.refusal("dial-error", 0)
	}
}

// commit stores items and malformed copies in one atomic batch with the
// relay record, the shard states a steal changed, and, if advance is set,
// the shard's new cursor. The queue is advanced and the states encoded
// inside the store's ingest lock (rawstore.Batch.State), so states reach
// disk in queue order while r.mu is held only for that moment: the
// relay's other workers keep paging during the commit. It returns the
// shard as it now stands.
func (r *relayCrawl) commit(items []relayconn.Item, malformed []rawstore.Malformed, advance *shardAdvance) (shard.Shard, error) {
	b := &rawstore.Batch{Relay: r.idx, Malformed: malformed}
	if len(items) > 0 {
		b.Events = copies(items)
	}
	var s shard.Shard
	b.State = func() (map[string][]byte, []byte, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		states := map[string][]byte{}
		if r.shardsDirty {
			for _, sh := range r.queue.Shards() {
				states[r.job.shardPrefix()+sh.ID] = encodeShard(sh)
			}
			r.shardsDirty = false
		}
		if advance != nil {
			var err error
			if s, err = r.queue.Advance(advance.id, advance.cursor); err != nil {
				return nil, nil, err
			}
			states[r.job.shardPrefix()+s.ID] = encodeShard(s)
			_, unordered := r.rec.Lies[lieUnordered]
			_, late := r.rec.Lies[lieAfterEOSE]
			if (unordered && advance.trusted) || (late && advance.endTrusted) {
				// Judged before the catch, landing after it: what the
				// catch marked for paging again (repageAllPaged) missed it.
				r.rec.Repage = addSpan(r.rec.Repage, Span{Since: advance.cursor, Until: advance.from})
			}
		}
		rec, err := json.Marshal(&r.rec)
		return states, rec, err
	}
	res, err := r.c.opts.Store.Ingest(b)
	if err != nil {
		return s, err
	}
	r.fresh.Add(int64(res.New))
	r.c.opts.OnCommit()
	return s, nil
}

type shardAdvance struct {
	id     string
	cursor int64
	// from is the cursor it moves from; trusted, that the move trusted the
	// relay to send a range's newest events (paging by until from a full
	// page's oldest event); endTrusted, that it was judged before the
	// relay was caught sending events after their page's EOSE (an empty
	// page was believed at once).
	from       int64
	trusted    bool
	endTrusted bool
}

// backoff sleeps for the attempt-th retry (relayconn.Backoff).
func (c *Crawler) backoff(ctx context.Context, attempt int) error {
	return relayconn.Backoff{Min: c.opts.BackoffMin, Max: c.opts.BackoffMax, Jitter: c.opts.jitter}.Wait(ctx, attempt)
}

// untilText shows a range's upper bound; 0 is none.
func untilText(until int64) string {
	if until == 0 {
		return "open"
	}
	return strconv.FormatInt(until, 10)
}
