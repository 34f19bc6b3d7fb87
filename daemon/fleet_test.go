package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/jobs"
	"github.com/nostr-archiver/archiver/testrelay"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func natsServer(t *testing.T) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true})
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

// natsClient is the test's own view of the queue and its records.
func natsClient(t *testing.T, url string) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	nc, err := jobs.Connect(config.NATS{URL: url}, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, kv, err := jobs.EnsureStream(ctx, js, jobs.Subjects{})
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}

// fleetNode is an archiver with discovery and NATS, seeded with the
// given relays (none: it only takes jobs), its logs observed.
func fleetNode(t *testing.T, natsURL, id string, allowPrivateTargets bool, seeds ...string) (*Daemon, *observer.ObservedLogs, func()) {
	t.Helper()
	cfg, err := config.Load("", config.Overrides{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Relays: seeds, NATSURL: natsURL})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Discover = config.Discover{Enabled: true, AllowPrivate: true, MaxRelays: 1000}
	cfg.NATS.AllowPrivateTargets = allowPrivateTargets
	cfg.Limits.MinFreeDiskBytes = 0
	core, logs := observer.New(zapcore.InfoLevel)
	d, err := New(Options{Config: cfg, Logger: zap.New(core).Named(id), NodeID: id})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	return d, logs, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node %s: Run: %v", id, err)
		}
	}
}

// meshRelays starts n relays that share ten events and each hold ten of
// their own and a relay list naming every other one: whichever relay a
// node crawls, it discovers all of them.
func meshRelays(t *testing.T, n int) ([]*testrelay.Relay, map[string]bool) {
	sk, err := btcec.NewPrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	w := &simWorld{t: t, sk: sk}
	relays := make([]*testrelay.Relay, n)
	for i := range relays {
		r, err := testrelay.New(testrelay.Options{MaxLimit: 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		relays[i] = r
	}
	ids := map[string]bool{}
	var shared []testrelay.Item
	for i := range 10 {
		shared = append(shared, w.note(fmt.Sprintf("shared %d", i)))
	}
	for i, r := range relays {
		items := append([]testrelay.Item(nil), shared...)
		for j := range 10 {
			items = append(items, w.note(fmt.Sprintf("relay %d note %d", i, j)))
		}
		var others []string
		for j, o := range relays {
			if j != i {
				others = append(others, o.URL())
			}
		}
		items = append(items, w.relayList(others...))
		r.Add(items...)
		for _, it := range items {
			ids[it.ID] = true
		}
	}
	return relays, ids
}

func sweepRecord(t *testing.T, kv jetstream.KeyValue, relay string) *jobs.Status {
	t.Helper()
	e, err := kv.Get(context.Background(), jobs.SweepID(relay))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var st jobs.Status
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// crawlsOf counts the crawls each relay got from a node's logs.
func crawlsOf(logs *observer.ObservedLogs, into map[string]int) {
	for _, e := range logs.FilterMessage("crawl starting").All() {
		into[e.ContextMap()["relay"].(string)]++
	}
}

// TestFleetSweep: two nodes, one seed. The relays discovered become sweep
// jobs on the shared queue; the fleet crawls every relay exactly once
// (the seed by its node, from the configuration; each other by whichever
// node took its job), and the union of the nodes' archives is everything.
func TestFleetSweep(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	srv := natsServer(t)
	js, kv := natsClient(t, srv.ClientURL())
	relays, ids := meshRelays(t, 6)
	seed := relays[0].URL()

	a, logsA, stopA := fleetNode(t, srv.ClientURL(), "a", true, seed)
	b, logsB, stopB := fleetNode(t, srv.ClientURL(), "b", true)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopA()
			stopB()
		}
	}
	defer stop()

	nodes := []*Daemon{a, b}
	deadline := time.Now().Add(60 * time.Second)
	for {
		swept := 0
		for _, r := range relays[1:] {
			if st := sweepRecord(t, kv, r.URL()); st != nil && st.State == jobs.StateDone {
				swept++
			}
		}
		union := map[[32]byte]bool{}
		quiet := true
		for _, d := range nodes {
			for id := range validNow(t, d.store) {
				union[id] = true
			}
			st, err := d.Status()
			if err != nil {
				t.Fatal(err)
			}
			quiet = quiet && st.Pending == 0 && st.Sweep.Pending == 0
		}
		info, err := js.Stream(context.Background(), "ARCHIVER_JOBS")
		if err != nil {
			t.Fatal(err)
		}
		si, err := info.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if swept == len(relays)-1 && len(union) == len(ids) && quiet && si.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fleet sweep: %d of %d relays swept, %d of %d events, quiet %v, %d jobs queued", swept, len(relays)-1, len(union), len(ids), quiet, si.State.Msgs)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// N nodes discovering one relay submit one job: a submission of a
	// relay the fleet has is a duplicate.
	j, err := jobs.SweepJob(relays[1].URL(), "nip65", strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	if dup, err := jobs.Submit(context.Background(), js, jobs.Subjects{}, j); err != nil || !dup {
		t.Errorf("submitting a swept relay again: dup %v, %v", dup, err)
	}
	stA, _ := a.Status()
	stB, _ := b.Status()
	stop()

	crawls := map[string]int{}
	crawlsOf(logsA, crawls)
	crawlsA := len(crawls)
	crawlsOf(logsB, crawls)
	for _, r := range relays {
		if n := crawls[r.URL()]; n != 1 {
			t.Errorf("relay %s crawled %d times by the fleet, want 1", r.URL(), n)
		}
	}
	if rec := sweepRecord(t, kv, seed); rec == nil || rec.Finish != jobs.FinishConfigured || rec.Node != "a" {
		t.Errorf("the seed's sweep record %+v: want claimed by a", rec)
	}
	nodesUsed := map[string]int{}
	for _, r := range relays[1:] {
		rec := sweepRecord(t, kv, r.URL())
		if rec.Deliveries != 1 || rec.Finish != "drained" || len(rec.Relays) != 1 || rec.Relays[0].Relay != r.URL() {
			t.Errorf("sweep record of %s: %+v", r.URL(), rec)
		}
		nodesUsed[rec.Node]++
	}
	submitted := stA.Sweep.Submitted + stB.Sweep.Submitted
	si, err := js.Stream(context.Background(), "ARCHIVER_JOBS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := si.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Every job the nodes submitted is one relay's (the seed's too, if b
	// found it: its job is dropped as claimed), and only those reached the
	// stream; the test's own copy was a duplicate.
	if submitted < len(relays)-1 || submitted > len(relays) || info.State.LastSeq != uint64(submitted) {
		t.Errorf("submitted %d jobs (a %+v, b %+v), stream holds %d messages ever; want %d or %d", submitted, stA.Sweep, stB.Sweep, info.State.LastSeq, len(relays)-1, len(relays))
	}
	t.Logf("jobs by node %v; a crawled %d relays; duplicates dropped a %d, b %d", nodesUsed, crawlsA, stA.Sweep.Duplicates, stB.Sweep.Duplicates)
}

// A sweep job for a relay on a private address is refused by the worker
// that takes it (nats.allow_private_targets off), even when the node that
// discovered it admits private names: the relay is never dialed.
func TestFleetSweepRefusesPrivateTargets(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	srv := natsServer(t)
	_, kv := natsClient(t, srv.ClientURL())
	relays, _ := meshRelays(t, 2)
	_, _, stop := fleetNode(t, srv.ClientURL(), "a", false, relays[0].URL())
	defer stop()
	deadline := time.Now().Add(60 * time.Second)
	var rec *jobs.Status
	for rec == nil || rec.State != jobs.StateFailed {
		if time.Now().After(deadline) {
			t.Fatalf("the private relay's sweep job: %+v", rec)
		}
		time.Sleep(50 * time.Millisecond)
		rec = sweepRecord(t, kv, relays[1].URL())
	}
	if rec.Finish != jobs.FinishInvalid || !strings.Contains(rec.Error, "private target") {
		t.Errorf("record %+v: want refused as a private target", rec)
	}
	if s := relays[1].Stats(); s.Conns != 0 || s.REQs != 0 {
		t.Errorf("the private relay was connected to %d times (%d REQs)", s.Conns, s.REQs)
	}
}
