package jobs

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/lazyparse"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/testrelay"
	"go.uber.org/zap/zaptest"
)

var subjects = Subjects{Prefix: "archiver", Stream: "ARCHIVER_JOBS"}

func runServer(t *testing.T, mutate func(*server.Options)) *server.Server {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true}
	if mutate != nil {
		mutate(o)
	}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func connect(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := Connect(config.NATS{URL: url}, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func fixture(t *testing.T, events int) *testrelay.Fixture {
	t.Helper()
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = t.TempDir()
	}
	f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 7, Events: events, Duplicates: 20, CacheDir: filepath.Join(dir, "archiver-test-fixtures")})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func startRelay(t *testing.T, f *testrelay.Fixture, opts testrelay.Options) *testrelay.Relay {
	t.Helper()
	r, err := testrelay.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.Add(f.Items...)
	t.Cleanup(func() { r.Close() })
	return r
}

// node is one archiver of the fleet: its own connection and store.
type node struct {
	id     string
	nc     *nats.Conn
	js     jetstream.JetStream
	store  *rawstore.Store
	w      *Worker
	cancel context.CancelFunc
	done   chan error
}

func startNode(t *testing.T, url, id string, mutate func(*WorkerOptions)) *node {
	t.Helper()
	n := &node{id: id, done: make(chan error, 1)}
	n.nc, n.js = connect(t, url)
	st, err := rawstore.Open(rawstore.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	n.store = st
	opts := WorkerOptions{
		JS: n.js, Subjects: subjects, Store: st, NodeID: id, MaxConcurrent: 1, AllowPrivate: true,
		SplitThreshold: -1, AckWait: 2 * time.Second, RetryDelay: 100 * time.Millisecond, FetchWait: 200 * time.Millisecond,
		Logger: zaptest.NewLogger(t).Named(id),
		CrawlOptions: func(*Job) crawl.Options {
			return crawl.Options{PageLimit: 100, Shards: 8, BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond, DialTimeout: 2 * time.Second, PageTimeout: 5 * time.Second}
		},
	}
	if mutate != nil {
		mutate(&opts)
	}
	n.w, err = New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- n.w.Run(ctx) }()
	t.Cleanup(func() { n.stop(t); st.Close() })
	return n
}

// stop cancels the worker and waits for Run to return (once).
func (n *node) stop(t *testing.T) {
	n.cancel()
	if n.done == nil {
		return
	}
	select {
	case err := <-n.done:
		if err != nil {
			t.Errorf("node %s: Run: %v", n.id, err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("node %s: Run did not return", n.id)
	}
	n.done = nil
}

// valid verifies the node's store and returns the ids export would write.
func (n *node) valid(t *testing.T) map[[32]byte]bool {
	t.Helper()
	p, err := lazyparse.New(lazyparse.Options{Store: n.store})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := map[[32]byte]bool{}
	if err := n.store.ForEachValid(func(id [32]byte, _ []byte) error { out[id] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func assertExactly(t *testing.T, got map[[32]byte]bool, f *testrelay.Fixture) {
	t.Helper()
	missing := 0
	for _, v := range f.Valid {
		if !got[v.ID] {
			if missing < 3 {
				t.Errorf("valid event %s missing", hex.EncodeToString(v.ID[:]))
			}
			missing++
		}
	}
	if missing > 0 || len(got) != len(f.Valid)-missing {
		t.Errorf("archive holds %d ids, %d missing, fixture has %d valid", len(got), missing, len(f.Valid))
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSplitAcrossNodes(t *testing.T) {
	srv := runServer(t, nil)
	f := fixture(t, 3000)
	relay := startRelay(t, f, testrelay.Options{Latency: 10 * time.Millisecond})
	split := func(o *WorkerOptions) { o.SplitThreshold, o.ShardCount = 3600, 6 }
	nodes := []*node{startNode(t, srv.ClientURL(), "n1", split), startNode(t, srv.ClientURL(), "n2", split), startNode(t, srv.ClientURL(), "n3", split)}

	nc, js := connect(t, srv.ClientURL())
	ctx := testCtx(t)
	if _, _, err := EnsureStream(ctx, js, subjects); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []Progress
	sub, err := nc.Subscribe(subjects.Progress(">"), func(m *nats.Msg) {
		var p Progress
		if err := json.Unmarshal(m.Data, &p); err == nil {
			mu.Lock()
			events = append(events, p)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	j := &Job{ID: "big", Relays: []string{relay.URL()}, Filter: Filter{Since: f.Since, Until: f.Until}, Mode: ModeBackfill, Priority: 5}
	if dup, err := Submit(ctx, js, subjects, j); err != nil || dup {
		t.Fatalf("Submit: dup %v, %v", dup, err)
	}
	r, err := Wait(ctx, js, subjects, "big", 100*time.Millisecond)
	if err != nil {
		t.Fatalf("Wait: %v (report %+v)", err, r)
	}
	if r.Job.State != StateSplit || len(r.Shards) != 6 {
		t.Fatalf("job %+v with %d shards, want split into 6", r.Job, len(r.Shards))
	}
	shardNodes := map[string]bool{}
	var stored int64
	for _, s := range r.Shards {
		shardNodes[s.Node] = true
		stored += s.Events
		if s.State != StateDone || s.Finish != crawl.FinishDrained || s.Parent != "big" {
			t.Errorf("shard %+v", s)
		}
	}
	if len(shardNodes) < 2 {
		t.Errorf("shards done by %v, want at least two nodes", shardNodes)
	}
	if stored != int64(len(f.Valid)) {
		t.Errorf("shards report %d events stored, want %d", stored, len(f.Valid))
	}

	// The status service answers the same report.
	rep, err := JobStatus(ctx, nc, subjects, "big")
	if err != nil || !rep.Drain || len(rep.Nodes) < 2 || len(rep.Shards) != 6 {
		t.Errorf("JobStatus = %+v, %v", rep, err)
	}
	if _, err := JobStatus(ctx, nc, subjects, "nosuch"); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("JobStatus(nosuch) = %v, want ErrJobNotFound", err)
	}
	msg, err := nc.RequestWithContext(ctx, subjects.StatusNode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var ns NodeStatus
	if err := json.Unmarshal(msg.Data, &ns); err != nil || !strings.HasPrefix(ns.Node, "n") || ns.Store.Events == 0 {
		t.Errorf("node status %s: %v", msg.Data, err)
	}

	union := map[[32]byte]bool{}
	for _, n := range nodes {
		for id := range n.valid(t) {
			union[id] = true
		}
	}
	assertExactly(t, union, f)

	mu.Lock()
	doneShards := 0
	for _, p := range events {
		if p.Job == "big" && p.Shard != "" && p.State == StateDone {
			doneShards++
		}
	}
	mu.Unlock()
	if doneShards != 6 {
		t.Errorf("%d done progress events for shards, want 6", doneShards)
	}
}

// killA runs a server and a relay, starts node a with mutate, submits job
// "one" over the relay, waits until a is crawling it, and kills a: its
// connection goes first, so nothing is acked or nak'ed. Then the relay
// serves at full speed and node b, started with mutate, is the fleet.
func killA(t *testing.T, mutate func(*WorkerOptions)) (context.Context, jetstream.JetStream, *testrelay.Fixture, *node) {
	t.Helper()
	srv := runServer(t, nil)
	f := fixture(t, 3000)
	relay := startRelay(t, f, testrelay.Options{Latency: 40 * time.Millisecond})
	_, js := connect(t, srv.ClientURL())
	ctx := testCtx(t)
	// The stream first: a node creating it at the same time as this test
	// once timed out (JetStream API, -race, -count=10).
	if _, _, err := EnsureStream(ctx, js, subjects); err != nil {
		t.Fatal(err)
	}
	a := startNode(t, srv.ClientURL(), "a", mutate)
	j := &Job{ID: "one", Relays: []string{relay.URL()}, Filter: Filter{Since: f.Since, Until: f.Until}, Mode: ModeBackfill}
	if _, err := Submit(ctx, js, subjects, j); err != nil {
		t.Fatal(err)
	}
	kv := mustKV(t, js)
	for {
		st, err := getStatus(ctx, kv, "one")
		if err == nil && st.State == StateRunning && st.Node == a.id && relay.Stats().Events > 200 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("node %s never ran the job", a.id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.nc.Close()
	a.stop(t)
	if err := relay.SetOptions(func(o *testrelay.Options) { o.Latency = 0 }); err != nil {
		t.Fatal(err)
	}
	return ctx, js, f, startNode(t, srv.ClientURL(), "b", mutate)
}

func TestNodeDeathRedelivers(t *testing.T) {
	ctx, js, f, b := killA(t, nil)
	r, err := Wait(ctx, js, subjects, "one", 100*time.Millisecond)
	if err != nil {
		t.Fatalf("Wait: %v (%+v)", err, r)
	}
	if r.Job.Node != "b" || r.Job.Deliveries < 2 {
		t.Errorf("job %+v: want done by b on a redelivery", r.Job)
	}
	assertExactly(t, b.valid(t), f)
}

// A node that dies holding a job's last delivery leaves no worker to
// record the end: the queue will not deliver it again. Another node
// learns it from the server's max-deliveries advisory and records the job
// failed, instead of its status saying "running" for ever.
func TestNodeDeathOnLastDeliveryFailsJob(t *testing.T) {
	ctx, js, _, b := killA(t, func(o *WorkerOptions) { o.MaxDeliver = 1 })
	r, err := Wait(ctx, js, subjects, "one", 100*time.Millisecond)
	if !errors.Is(err, ErrNotDrained) {
		t.Fatalf("Wait: %v (%+v), want %v", err, r, ErrNotDrained)
	}
	if r.Job.State != StateFailed || r.Job.Node != "a" || r.Job.Deliveries != 1 || !strings.Contains(r.Job.Error, "lease") {
		t.Errorf("job %+v: want failed, held by a, 1 delivery, the lost lease as its error", r.Job)
	}
	if st, err := b.store.Stats(); err != nil || st.Events != 0 {
		t.Errorf("node b stored %d events (err %v), want none: the job must not run again", st.Events, err)
	}
	stream, err := js.Stream(ctx, subjects.Stream)
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := stream.Info(ctx)
		if err == nil && info.State.Msgs == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the failed job stays queued: %+v, %v", info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDuplicateRunsOnce(t *testing.T) {
	srv := runServer(t, nil)
	f := fixture(t, 500)
	relay := startRelay(t, f, testrelay.Options{})
	_, js := connect(t, srv.ClientURL())
	ctx := testCtx(t)
	if _, _, err := EnsureStream(ctx, js, subjects); err != nil {
		t.Fatal(err)
	}
	j := &Job{ID: "twice", Relays: []string{relay.URL()}, Filter: Filter{Since: f.Since, Until: f.Until}, Mode: ModeBackfill}
	for i, want := range []bool{false, true} {
		if dup, err := Submit(ctx, js, subjects, j); err != nil || dup != want {
			t.Fatalf("submission %d: dup %v, %v; want dup %v", i, dup, err, want)
		}
	}
	n := startNode(t, srv.ClientURL(), "n", nil)
	r, err := Wait(ctx, js, subjects, "twice", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	reqs := relay.Stats().REQs
	// A copy past the dedup window (no message id) is dropped as done.
	data, _ := json.Marshal(j)
	if _, err := js.Publish(ctx, subjects.Submit(), data); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, subjects.Stream)
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("stream still holds %d jobs", info.State.Msgs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := relay.Stats().REQs; got != reqs {
		t.Errorf("relay got %d more REQs: the job ran again", got-reqs)
	}
	again, err := getStatus(ctx, mustKV(t, js), "twice")
	if err != nil || again.Deliveries != 1 || !again.Updated.Equal(r.Job.Updated) {
		t.Errorf("status after the copy %+v, %v; want untouched %+v", again, err, r.Job)
	}
	list, err := ListJobs(ctx, js, subjects)
	if err != nil || len(list) != 1 || list[0].ID != "twice" || list[0].State != StateDone {
		t.Errorf("ListJobs = %+v, %v", list, err)
	}
	assertExactly(t, n.valid(t), f)
}

func mustKV(t *testing.T, js jetstream.JetStream) jetstream.KeyValue {
	kv, err := js.KeyValue(context.Background(), subjects.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func TestInvalidJobsTerminated(t *testing.T) {
	srv := runServer(t, nil)
	f := fixture(t, 200)
	relay := startRelay(t, f, testrelay.Options{})
	// "localhost" passes the private-target check through the injected
	// resolver, and the crawler's dialer still reaches the test relay.
	public := func(_ context.Context, host string) ([]netip.Addr, error) {
		if host == "localhost" {
			return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
		}
		return nil, errors.New("no such host")
	}
	nc, js := connect(t, srv.ClientURL())
	ctx := testCtx(t)
	startNode(t, srv.ClientURL(), "n", func(o *WorkerOptions) { o.AllowPrivate, o.Resolve = false, public })
	if _, _, err := EnsureStream(ctx, js, subjects); err != nil {
		t.Fatal(err)
	}

	publish := func(msgID, body string) {
		t.Helper()
		var opts []jetstream.PublishOpt
		if msgID != "" {
			opts = append(opts, jetstream.WithMsgID(msgID))
		}
		if _, err := js.Publish(ctx, subjects.Submit(), []byte(body), opts...); err != nil {
			t.Fatal(err)
		}
	}
	good := strings.Replace(relay.URL(), "127.0.0.1", "localhost", 1)
	bad := []struct{ id, msgID, body, want string }{
		{"bad-json", "bad-json", `{"id":"bad-json",`, "unexpected EOF"},
		{"unknown", "", `{"id":"unknown","relays":["r.example"],"relys":[]}`, `unknown field "relys"`},
		{"private", "private", `{"id":"private","relays":["` + relay.URL() + `"]}`, "private target"},
		{"bad-url", "bad-url", `{"id":"bad-url","relays":["ftp://r.example"]}`, "not ws or wss"},
		{"authors", "authors", `{"id":"authors","relays":["` + good + `"],"filter":{"authors":["` + strings.Repeat("A", 64) + `"]}}`, "want 64 lowercase hex"},
	}
	for _, b := range bad {
		publish(b.msgID, b.body)
	}
	publish("", `not json at all`) // no id anywhere: recorded as invalid-<seq>
	// The worker survives them all and runs the good jobs after, in
	// order: one author's events, then the rest.
	author, byAuthor := f.Authors[0], int64(0)
	for _, v := range f.Valid {
		if e, err := event.Parse(v.Line); err == nil && hex.EncodeToString(e.PubKey[:]) == author {
			byAuthor++
		}
	}
	good1 := &Job{ID: "by-author", Relays: []string{good}, Filter: Filter{Since: f.Since, Until: f.Until, Authors: []string{author}}, Mode: ModeBackfill}
	okJob := &Job{ID: "ok", Relays: []string{good}, Filter: Filter{Since: f.Since, Until: f.Until}, Mode: ModeBackfill}
	for _, j := range []*Job{good1, okJob} {
		if _, err := Submit(ctx, js, subjects, j); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := Wait(ctx, js, subjects, "by-author", 50*time.Millisecond); err != nil || byAuthor == 0 || r.Job.Events != byAuthor {
		t.Fatalf("job of one author (%d events): %+v, %v", byAuthor, r, err)
	}
	if r, err := Wait(ctx, js, subjects, "ok", 50*time.Millisecond); err != nil || r.Job.Events != int64(len(f.Valid))-byAuthor {
		t.Fatalf("good job after bad ones: %+v, %v", r, err)
	}
	for _, b := range bad {
		r, err := Wait(ctx, js, subjects, b.id, 50*time.Millisecond)
		if !errors.Is(err, ErrNotDrained) {
			t.Errorf("%s: Wait = %v, want ErrNotDrained", b.id, err)
			continue
		}
		rep, err := JobStatus(ctx, nc, subjects, b.id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Job.State != StateFailed || rep.Job.Finish != FinishInvalid || !strings.Contains(rep.Job.Error, b.want) {
			t.Errorf("%s: status %+v, want failed/invalid naming %q", b.id, rep.Job, b.want)
		}
	}
	list, err := ListJobs(ctx, js, subjects)
	if err != nil {
		t.Fatal(err)
	}
	anonymous := 0
	for _, s := range list {
		if strings.HasPrefix(s.ID, "invalid-") && s.State == StateFailed {
			anonymous++
		}
	}
	if anonymous != 1 {
		t.Errorf("%d invalid-<seq> records, want 1: %+v", anonymous, list)
	}
	// Terminated, not redelivered: the stream is empty.
	stream, err := js.Stream(ctx, subjects.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := stream.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Errorf("stream after the jobs: %+v, %v", info.State, err)
	}
}

func TestConnectAuth(t *testing.T) {
	srv := runServer(t, func(o *server.Options) { o.Username, o.Password = "archiver", "s3cret" })
	url := srv.ClientURL()
	for _, tc := range []struct {
		name string
		cfg  config.NATS
		ok   bool
	}{
		{"no credentials", config.NATS{URL: url}, false},
		{"wrong password", config.NATS{URL: url, User: "archiver", Password: "nope"}, false},
		{"token instead", config.NATS{URL: url, Token: "s3cret"}, false},
		{"user and password", config.NATS{URL: url, User: "archiver", Password: "s3cret"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := Connect(tc.cfg, "test")
			if (err == nil) != tc.ok {
				t.Fatalf("Connect = %v, want ok %v", err, tc.ok)
			}
			if err != nil {
				if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(err.Error(), "Authorization") {
					t.Errorf("refusal %v is not an authorization error", err)
				}
				return
			}
			defer nc.Close()
			if err := nc.Flush(); err != nil {
				t.Error(err)
			}
		})
	}
	tok := runServer(t, func(o *server.Options) { o.Authorization = "t0ken" })
	if nc, err := Connect(config.NATS{URL: tok.ClientURL(), Token: "t0ken"}, "test"); err != nil {
		t.Errorf("token: %v", err)
	} else {
		nc.Close()
	}
	if _, err := Connect(config.NATS{URL: tok.ClientURL()}, "test"); err == nil {
		t.Error("token server accepted a client without one")
	}
}

func TestLiveJobHandedBackOnShutdown(t *testing.T) {
	srv := runServer(t, nil)
	f := fixture(t, 300)
	relay := startRelay(t, f, testrelay.Options{})
	_, js := connect(t, srv.ClientURL())
	ctx := testCtx(t)
	n := startNode(t, srv.ClientURL(), "n", nil)
	if _, _, err := EnsureStream(ctx, js, subjects); err != nil {
		t.Fatal(err)
	}
	j := &Job{ID: "tail", Relays: []string{relay.URL()}, Filter: Filter{Since: f.Since}, Mode: ModeLive}
	if _, err := Submit(ctx, js, subjects, j); err != nil {
		t.Fatal(err)
	}
	kv := mustKV(t, js)
	var last *Status
	for {
		st, err := getStatus(ctx, kv, "tail")
		if err == nil {
			last = st
		}
		if err == nil && st.State == StateRunning && st.Events == int64(len(f.Valid)) {
			break // heartbeats report the tail's progress
		}
		if ctx.Err() != nil {
			t.Fatalf("live job never caught up: %+v", last)
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.stop(t)
	st, err := getStatus(ctx, kv, "tail")
	if err != nil || st.State != StateQueued || st.Finish != crawl.FinishCanceled {
		t.Errorf("after shutdown: %+v, %v; want queued/canceled", st, err)
	}
	stream, err := js.Stream(ctx, subjects.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := stream.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Errorf("stream after shutdown: %+v, %v; want the live job still queued", info.State, err)
	}
}
