package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/rawstore"
	"go.uber.org/zap"
)

// WorkerOptions configure a Worker. Zero values mean the defaults of
// setDefaults.
type WorkerOptions struct {
	JS       jetstream.JetStream
	Subjects Subjects
	// Store is this node's own archive: nodes share nothing but the queue.
	Store  *rawstore.Store
	NodeID string // required; names the node in status records

	MaxConcurrent int  // jobs run at once; default 2
	AllowPrivate  bool // accept relays on private addresses (tests, labs)
	// Resolve is passed to Job.Validate; default the system resolver.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)

	// A backfill job of one relay whose range spans more than
	// SplitThreshold seconds is split into ShardCount shard jobs on the
	// queue, so that several nodes (and IPs) crawl it. Defaults 30 days
	// and 8; a negative threshold never splits.
	SplitThreshold int64
	ShardCount     int

	MaxDeliver int           // deliveries before a job fails for good; default 5
	AckWait    time.Duration // the consumer's lease; heartbeats every third of it; default 30s
	RetryDelay time.Duration // redelivery delay after a transient failure, times the delivery count; default 10s
	FetchWait  time.Duration // how long one pull waits for a job; default 5s

	Logger *zap.Logger
	// CrawlOptions, if set, gives the crawl tuning for a job; the worker
	// sets Store, range and kinds itself.
	CrawlOptions func(*Job) crawl.Options
	Now          func() time.Time
}

func (o *WorkerOptions) setDefaults() {
	o.Subjects = o.Subjects.withDefaults()
	if o.MaxConcurrent == 0 {
		o.MaxConcurrent = 2
	}
	if o.SplitThreshold == 0 {
		o.SplitThreshold = 30 * 24 * 3600
	}
	if o.ShardCount == 0 {
		o.ShardCount = 8
	}
	if o.MaxDeliver == 0 {
		o.MaxDeliver = 5
	}
	if o.AckWait == 0 {
		o.AckWait = 30 * time.Second
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = 10 * time.Second
	}
	if o.FetchWait == 0 {
		o.FetchWait = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.CrawlOptions == nil {
		o.CrawlOptions = func(*Job) crawl.Options { return crawl.Options{} }
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate reports the first bad option.
func (o *WorkerOptions) Validate() error {
	switch {
	case o.JS == nil:
		return errors.New("jobs: JS is required")
	case o.Store == nil:
		return errors.New("jobs: Store is required")
	case !ValidID(o.NodeID):
		return fmt.Errorf("jobs: node id %q: want [A-Za-z0-9._-]{1,128}", o.NodeID)
	case o.MaxConcurrent < 1:
		return fmt.Errorf("jobs: MaxConcurrent %d < 1", o.MaxConcurrent)
	case o.ShardCount < 2 || o.ShardCount > 1000:
		return fmt.Errorf("jobs: ShardCount %d outside [2,1000]", o.ShardCount)
	case o.MaxDeliver < 1:
		return fmt.Errorf("jobs: MaxDeliver %d < 1", o.MaxDeliver)
	case o.AckWait < time.Second:
		return fmt.Errorf("jobs: AckWait %v < 1s", o.AckWait)
	case o.RetryDelay < 0 || o.FetchWait < 10*time.Millisecond:
		return fmt.Errorf("jobs: RetryDelay %v, FetchWait %v: want >= 0, >= 10ms", o.RetryDelay, o.FetchWait)
	}
	return nil
}

// Worker takes jobs from the shared queue and crawls them into its node's
// store.
type Worker struct {
	opts   WorkerOptions
	log    *zap.Logger
	nc     *nats.Conn
	kv     jetstream.KeyValue
	stream jetstream.Stream

	mu      sync.Mutex
	running map[string]time.Time // job id -> start
}

// New validates opts and returns a Worker; Run connects it to the queue.
func New(opts WorkerOptions) (*Worker, error) {
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Worker{
		opts:    opts,
		log:     opts.Logger.With(zap.String("node", opts.NodeID)),
		nc:      opts.JS.Conn(),
		running: map[string]time.Time{},
	}, nil
}

// Run ensures the stream, bucket and consumer exist, serves the status
// service, and runs jobs until ctx ends; it returns after every job it
// started has stopped (jobs cut short are handed back to the queue).
func (w *Worker) Run(ctx context.Context) error {
	s := w.opts.Subjects
	stream, kv, err := EnsureStream(ctx, w.opts.JS, s)
	if err != nil {
		return err
	}
	w.stream, w.kv = stream, kv
	cons, err := w.opts.JS.CreateOrUpdateConsumer(ctx, s.Stream, jetstream.ConsumerConfig{
		Durable:     s.Consumer(),
		Description: "archiver workers",
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     w.opts.AckWait,
		MaxDeliver:  w.opts.MaxDeliver,
	})
	if err != nil {
		return fmt.Errorf("jobs: consumer: %w", err)
	}
	svc, err := w.addService()
	if err != nil {
		return err
	}
	defer svc.Stop()
	stopLost, err := w.watchLostLeases(ctx)
	if err != nil {
		return err
	}
	defer stopLost()

	sem := make(chan struct{}, w.opts.MaxConcurrent)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		msg, err := w.next(ctx, cons)
		if msg == nil {
			<-sem
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				w.log.Warn("fetch", zap.Error(err))
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			w.handle(ctx, msg)
		}()
	}
}

// next pulls one job, only when a slot is free: a job fetched early would
// age on its lease while it waits.
func (w *Worker) next(ctx context.Context, cons jetstream.Consumer) (jetstream.Msg, error) {
	fctx, cancel := context.WithTimeout(ctx, w.opts.FetchWait)
	defer cancel()
	batch, err := cons.Fetch(1, jetstream.FetchContext(fctx))
	if err != nil {
		return nil, err
	}
	var msg jetstream.Msg
	for m := range batch.Messages() {
		msg = m
	}
	if msg != nil && ctx.Err() != nil {
		_ = msg.Nak() // stopping: hand it back at once
		return nil, nil
	}
	if err := batch.Error(); msg == nil && err != nil && fctx.Err() == nil {
		return nil, err
	}
	return msg, nil
}

// handle runs one delivery to its end: ack, nak or term. It never panics
// on bad input and never leaves a job to be retried forever.
func (w *Worker) handle(ctx context.Context, msg jetstream.Msg) {
	var deliveries uint64 = 1
	var seq uint64
	if md, err := msg.Metadata(); err == nil {
		deliveries, seq = md.NumDelivered, md.Sequence.Stream
	}
	j, err := Decode(msg.Data())
	if err == nil {
		j.Resolve = w.opts.Resolve
		err = j.Validate(w.opts.AllowPrivate)
	}
	if err != nil {
		w.refuse(ctx, msg, j, seq, err)
		return
	}
	log := w.log.With(zap.String("job", j.ID), zap.Uint64("delivery", deliveries))
	prev, err := getStatus(ctx, w.kv, j.ID)
	if err != nil && !errors.Is(err, ErrJobNotFound) {
		log.Warn("read status", zap.Error(err))
		_ = msg.NakWithDelay(w.opts.RetryDelay)
		return
	}
	switch {
	case prev != nil && prev.State == StateDone:
		// Resubmitted after the dedup window: it ran already.
		log.Info("job already done, dropping the copy")
		_ = msg.Ack()
	case prev != nil && prev.State == StateSplit, w.shouldSplit(j):
		w.split(ctx, msg, j, prev, log)
	default:
		w.run(ctx, msg, j, deliveries, log)
	}
}

// refuse terminates a job that can never run, recording why under its id
// (else its Nats-Msg-Id, else "invalid-<stream seq>").
func (w *Worker) refuse(ctx context.Context, msg jetstream.Msg, j *Job, seq uint64, cause error) {
	id := fmt.Sprintf("invalid-%d", seq)
	var loose struct {
		ID string `json:"id"`
	}
	switch {
	case j != nil:
		id = j.ID
	case ValidID(msg.Headers().Get(jetstream.MsgIDHeader)):
		id = msg.Headers().Get(jetstream.MsgIDHeader)
	case json.Unmarshal(msg.Data(), &loose) == nil && ValidID(loose.ID):
		id = loose.ID
	}
	w.log.Warn("refusing job", zap.String("job", id), zap.Error(cause))
	st := &Status{ID: id, State: StateFailed, Node: w.opts.NodeID, Finish: FinishInvalid, Error: cause.Error()}
	if j != nil {
		st.Parent = j.Parent
	}
	w.record(ctx, st)
	_ = msg.Term()
}

func (w *Worker) shouldSplit(j *Job) bool {
	if j.Mode != ModeBackfill || j.Parent != "" || j.Found != nil || len(j.Relays) != 1 || w.opts.SplitThreshold < 0 {
		return false
	}
	since, until := j.crawlRange()
	if until == 0 {
		until = w.opts.Now().Unix()
	}
	return until-since > w.opts.SplitThreshold
}

// split publishes j's shard jobs and records them on j's status before
// acking j. A redelivered parent republishes the recorded shards: the
// queue's dedup by id collapses the copies.
func (w *Worker) split(ctx context.Context, msg jetstream.Msg, j *Job, prev *Status, log *zap.Logger) {
	st := prev
	if st == nil || st.State != StateSplit {
		since, until := j.crawlRange()
		if until == 0 {
			until = max(since, w.opts.Now().Unix())
		}
		st = &Status{ID: j.ID, State: StateSplit, Node: w.opts.NodeID, Shards: planShards(j.ID, since, until, w.opts.ShardCount)}
		if j.Filter.Until == 0 {
			// "Now" was only where to cut: the newest shard has no bound.
			st.Shards[len(st.Shards)-1].Open = true
		}
		if err := w.put(ctx, st); err != nil {
			log.Warn("record split", zap.Error(err))
			_ = msg.NakWithDelay(w.opts.RetryDelay)
			return
		}
	}
	for _, sh := range st.Shards {
		sj := *j
		sj.ID, sj.Parent, sj.Shard = sh.ID, j.ID, &Range{Since: sh.Since, Until: sh.Until, Open: sh.Open}
		if _, err := Submit(ctx, w.opts.JS, w.opts.Subjects, &sj); err != nil {
			log.Warn("publish shard", zap.String("shard", sh.ID), zap.Error(err))
			_ = msg.NakWithDelay(w.opts.RetryDelay)
			return
		}
	}
	log.Info("split", zap.Int("shards", len(st.Shards)))
	w.progress(st)
	_ = msg.Ack()
}

// planShards cuts [since, until] into k disjoint inclusive ranges of equal
// width (the first width%k one second wider), or fewer if it is shorter.
func planShards(id string, since, until int64, k int) []ShardRef {
	width := until - since + 1
	n := int64(k)
	if width < n {
		n = width
	}
	q, r := width/n, width%n
	out := make([]ShardRef, 0, n)
	start := since
	for i := int64(0); i < n; i++ {
		end := start + q - 1
		if i < r {
			end++
		}
		out = append(out, ShardRef{ID: shardID(id, int(i)), Range: Range{Since: start, Until: end}})
		start = end + 1
	}
	return out
}

// run crawls j into the node's store, heartbeating the lease.
func (w *Worker) run(ctx context.Context, msg jetstream.Msg, j *Job, deliveries uint64, log *zap.Logger) {
	st := &Status{ID: j.ID, Parent: j.Parent, State: StateRunning, Node: w.opts.NodeID, Deliveries: deliveries}
	w.record(ctx, st)
	w.track(j.ID, true)
	defer w.track(j.ID, false)

	urls := make([]string, len(j.Relays))
	for i, r := range j.Relays {
		urls[i], _ = crawl.NormalizeURL(r) // Validate checked it
	}
	before := w.newCounts(urls)
	jctx, stop := context.WithCancel(ctx)
	var hb sync.WaitGroup
	hb.Add(1)
	go func() {
		defer hb.Done()
		t := time.NewTicker(w.opts.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-jctx.Done():
				return
			case <-t.C:
				if err := msg.InProgress(); err != nil {
					log.Warn("heartbeat", zap.Error(err))
				}
				st.Events = sum(w.newCounts(urls), before)
				w.record(jctx, st)
			}
		}
	}()
	results, err := w.crawl(jctx, j, urls, log)
	stop()
	hb.Wait()

	after := w.newCounts(urls)
	st.Events = sum(after, before)
	st.Relays = make([]RelayResult, len(results))
	for i, r := range results {
		st.Relays[i] = RelayResult{Relay: r.Relay, Finish: r.Finish, Detail: r.Detail, Events: after[i] - before[i]}
	}
	st.Finish, st.Error = outcome(results)
	if err != nil {
		st.Finish, st.Error = FinishInvalid, err.Error()
	}
	switch {
	case err != nil || permanent(st.Finish):
		st.State = StateFailed
		w.record(ctx, st)
		_ = msg.Term()
	case st.Finish == crawl.FinishDrained || st.Finish == crawl.FinishIncompleteWalls || st.Finish == crawl.FinishUnproven || st.Finish == crawl.FinishDamaged:
		st.State = StateDone
		w.record(ctx, st)
		_ = msg.Ack()
	case deliveries >= uint64(w.opts.MaxDeliver):
		st.State = StateFailed
		st.Error = fmt.Sprintf("gave up after %d deliveries: %s", deliveries, st.Error)
		w.record(ctx, st)
		_ = msg.Term()
	default:
		// Transient: hand it back. A shutdown hands it back at once, for
		// another node; a failure waits longer each time.
		st.State = StateQueued
		w.record(ctx, st)
		delay := w.opts.RetryDelay * time.Duration(deliveries)
		if ctx.Err() != nil {
			delay = 0
		}
		_ = msg.NakWithDelay(delay)
	}
	log.Info("job finished", zap.String("state", st.State), zap.String("finish", st.Finish), zap.Int64("events", st.Events))
}

// crawl runs a backfill, or tails every relay of a live job until ctx
// ends. A non-nil error means the job cannot run at all.
func (w *Worker) crawl(ctx context.Context, j *Job, urls []string, log *zap.Logger) ([]crawl.Result, error) {
	opts := w.opts.CrawlOptions(j)
	opts.Store = w.opts.Store
	opts.Since, opts.Until = j.crawlRange()
	opts.Kinds, opts.Authors = j.Filter.Kinds, j.Filter.Authors
	if opts.Logger == nil {
		opts.Logger = log
	}
	c, err := crawl.New(opts)
	if err != nil {
		return nil, err
	}
	if j.Mode == ModeBackfill {
		return c.Run(ctx, urls), nil
	}
	out := make([]crawl.Result, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			since := j.Filter.Since
			if since == 0 {
				since = w.opts.Now().Unix()
			}
			out[i] = crawl.Result{Relay: u, Finish: crawl.FinishCanceled}
			if err := c.Tail(ctx, u, crawl.TailOptions{Since: since, Floor: j.Filter.Since}); err != nil {
				out[i] = crawl.Result{Relay: u, Finish: crawl.FinishRefused, Detail: err.Error()}
			}
		}()
	}
	wg.Wait()
	return out, nil
}

// outcome is the worst finish of a job's relays and its detail. Transient
// finishes outrank permanent ones: the job is retried, and the relays
// that drained resume from their cursors on the same node.
func outcome(rs []crawl.Result) (finish, detail string) {
	rank := func(f string) int {
		switch f {
		case crawl.FinishDrained:
			return 0
		case crawl.FinishIncompleteWalls, crawl.FinishUnproven, crawl.FinishDamaged:
			return 1
		case crawl.FinishAuthRequired, crawl.FinishUnpageable, crawl.FinishRefused, crawl.FinishRestricted, crawl.FinishAuthRejected:
			return 2
		}
		return 3
	}
	finish = crawl.FinishDrained
	for _, r := range rs {
		if rank(r.Finish) > rank(finish) {
			finish, detail = r.Finish, r.String()
		}
	}
	return finish, detail
}

// permanent reports finishes that another delivery would not change.
func permanent(finish string) bool {
	switch finish {
	case crawl.FinishAuthRequired, crawl.FinishUnpageable, crawl.FinishRefused, crawl.FinishRestricted, crawl.FinishAuthRejected, FinishInvalid:
		return true
	}
	return false
}

// newCounts reads the per-relay "new ids" counters of urls.
func (w *Worker) newCounts(urls []string) []int64 {
	out := make([]int64, len(urls))
	for i, u := range urls {
		idx, err := w.opts.Store.RelayIndex(u)
		if err != nil {
			continue
		}
		if c, err := w.opts.Store.RelayCounters(idx); err == nil {
			out[i] = c["new"]
		}
	}
	return out
}

func sum(after, before []int64) int64 {
	var n int64
	for i := range after {
		n += after[i] - before[i]
	}
	return n
}

func (w *Worker) track(id string, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if on {
		w.running[id] = w.opts.Now()
	} else {
		delete(w.running, id)
	}
}

// put writes a status record.
func (w *Worker) put(ctx context.Context, st *Status) error {
	st.Updated = w.opts.Now().UTC()
	// A job cut short by shutdown is still recorded.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := w.kv.Put(ctx, st.ID, st.encode())
	return err
}

// record writes a status record and publishes it as a progress event;
// failures are logged, never fatal: the queue, not the record, is the
// truth about what is left to do.
func (w *Worker) record(ctx context.Context, st *Status) {
	if err := w.put(ctx, st); err != nil {
		w.log.Warn("record status", zap.String("job", st.ID), zap.Error(err))
	}
	w.progress(st)
}

// Progress is the event published on Subjects.Progress(job) as a job or
// one of its shards advances.
type Progress struct {
	Job    string `json:"job"`
	Shard  string `json:"shard,omitempty"`
	Node   string `json:"node"`
	State  string `json:"state"`
	Events int64  `json:"events"`
	Finish string `json:"finish,omitempty"`
	Error  string `json:"error,omitempty"`
}

func (w *Worker) progress(st *Status) {
	p := Progress{Job: st.ID, Node: w.opts.NodeID, State: st.State, Events: st.Events, Finish: st.Finish, Error: st.Error}
	if st.Parent != "" {
		p.Job, p.Shard = st.Parent, st.ID
	}
	b, _ := json.Marshal(p)
	if err := w.nc.Publish(w.opts.Subjects.Progress(p.Job), b); err != nil {
		w.log.Debug("progress", zap.Error(err))
	}
}

// NodeStatus is the status service's answer about one node.
type NodeStatus struct {
	Node    string         `json:"node"`
	Running []RunningJob   `json:"running"`
	Store   rawstore.Stats `json:"store"`
}

// RunningJob is a job a node holds.
type RunningJob struct {
	ID      string    `json:"id"`
	Started time.Time `json:"started"`
}

// Status reports this node's id, running jobs and store counters.
func (w *Worker) Status() (NodeStatus, error) {
	ns := NodeStatus{Node: w.opts.NodeID, Running: []RunningJob{}}
	w.mu.Lock()
	for id, t := range w.running {
		ns.Running = append(ns.Running, RunningJob{ID: id, Started: t})
	}
	w.mu.Unlock()
	slices.SortFunc(ns.Running, func(a, b RunningJob) int { return a.Started.Compare(b.Started) })
	var err error
	ns.Store, err = w.opts.Store.Stats()
	return ns, err
}

// Version is the status service's version.
const Version = "0.1.0"

// addService registers the "archiver" micro service: status.job answers
// from the shared bucket (one node of the queue group answers);
// status.node has no queue group, so every node answers and a client may
// gather all the replies.
func (w *Worker) addService() (micro.Service, error) {
	s := w.opts.Subjects
	svc, err := micro.AddService(w.nc, micro.Config{
		Name:        "archiver",
		Version:     Version,
		Description: "archiver job and node status",
		Metadata:    map[string]string{"node": w.opts.NodeID},
	})
	if err != nil {
		return nil, fmt.Errorf("jobs: status service: %w", err)
	}
	err = svc.AddEndpoint("job", micro.HandlerFunc(w.serveJob), micro.WithEndpointSubject(s.StatusJob()))
	if err == nil {
		err = svc.AddEndpoint("node", micro.HandlerFunc(w.serveNode), micro.WithEndpointSubject(s.StatusNode()), micro.WithEndpointQueueGroupDisabled())
	}
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("jobs: status service: %w", err)
	}
	return svc, nil
}

func (w *Worker) serveJob(req micro.Request) {
	var q jobRequest
	if err := json.Unmarshal(req.Data(), &q); err != nil || q.ID == "" {
		_ = req.Error("400", `want {"id":"<job id>"}`, nil)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := report(ctx, w.kv, q.ID)
	switch {
	case errors.Is(err, ErrJobNotFound):
		_ = req.Error("404", "job not found", nil)
	case err != nil:
		_ = req.Error("500", err.Error(), nil)
	default:
		_ = req.RespondJSON(r)
	}
}

func (w *Worker) serveNode(req micro.Request) {
	ns, err := w.Status()
	if err != nil {
		_ = req.Error("500", err.Error(), nil)
		return
	}
	_ = req.RespondJSON(ns)
}
