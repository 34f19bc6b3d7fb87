package lazyparse

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/nostr-archiver/archiver/bip340"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func signed(t *testing.T, sk *btcec.PrivateKey, content string, ts int64) *event.Event {
	t.Helper()
	e := &event.Event{CreatedAt: ts, Kind: 1, Tags: [][]string{}, Content: content}
	if err := e.Sign(sk); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestJudgeReasons(t *testing.T) {
	sk, _ := btcec.NewPrivateKey()
	good := signed(t, sk, "hello", 100)
	raw := event.AppendJSON(nil, good)

	forged := *good
	forged.Content = "tampered"
	badSig := *good
	badSig.Sig[10] ^= 1
	badKey := *good
	badKey.PubKey = [32]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 0xff, 0xff, 0xfc, 0x30}
	badKey.ID, _ = badKey.ComputeID(nil)
	escaped := bytes.Replace(raw, []byte(`"content":"hello"`), []byte(`"content":"h\u0065llo"`), 1)

	cases := []struct {
		name string
		id   [32]byte
		raw  []byte
		want string
	}{
		{"valid", good.ID, raw, ""},
		{"valid with escapes", good.ID, escaped, ""},
		{"forged content", good.ID, event.AppendJSON(nil, &forged), ReasonIDMismatch},
		{"bad sig", good.ID, event.AppendJSON(nil, &badSig), ReasonBadSig},
		{"pubkey not on curve", badKey.ID, event.AppendJSON(nil, &badKey), ReasonBadPubKey},
		{"malformed", good.ID, raw[:len(raw)-2], ReasonMalformed},
		{"keyed by another id", badKey.ID, raw, ReasonMalformed},
	}
	// Alone, and all in one batch between valid events (a batch whose
	// signature check fails must still single out the bad one).
	j := NewJudge(DefaultVerifiers()())
	var batch []rawstore.Pending
	var want []string
	for _, tc := range cases {
		vs := make([]rawstore.Verdict, 1)
		j.Run([]rawstore.Pending{{ID: tc.id, Raw: tc.raw}}, vs)
		if vs[0].Valid != (tc.want == "") || vs[0].Reason != tc.want {
			t.Errorf("%s: verdict %+v, want reason %q", tc.name, vs[0], tc.want)
		}
		for k := range 5 {
			e := signed(t, sk, fmt.Sprint(tc.name, k), 200)
			batch = append(batch, rawstore.Pending{ID: e.ID, Raw: event.AppendJSON(nil, e)})
			want = append(want, "")
		}
		batch = append(batch, rawstore.Pending{ID: tc.id, Raw: tc.raw})
		want = append(want, tc.want)
	}
	vs := make([]rawstore.Verdict, len(batch))
	j.Run(batch, vs)
	for i := range batch {
		if vs[i].Valid != (want[i] == "") || vs[i].Reason != want[i] {
			t.Errorf("in a batch, copy %d: verdict %+v, want reason %q", i, vs[i], want[i])
		}
	}
}

// openStore opens an archive for the test with its one relay.
func openStore(t *testing.T, opts rawstore.Options) (*rawstore.Store, uint32) {
	t.Helper()
	opts.Dir = t.TempDir()
	st, err := rawstore.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r, _ := st.RelayIndex("ws://test")
	return st, r
}

// ingestSigned stores n valid events of sk, labelled label.
func ingestSigned(t *testing.T, st *rawstore.Store, relay uint32, sk *btcec.PrivateKey, n int, label string) {
	t.Helper()
	var copies []rawstore.Copy
	for i := range n {
		e := signed(t, sk, fmt.Sprint(label, i), int64(1000+i))
		copies = append(copies, rawstore.Copy{ID: e.ID, Raw: event.AppendJSON(nil, e)})
	}
	if _, err := st.Ingest(&rawstore.Batch{Relay: relay, Events: copies}); err != nil {
		t.Fatal(err)
	}
}

func TestPoolDrainsStore(t *testing.T) {
	st, r := openStore(t, rawstore.Options{})
	sk, _ := btcec.NewPrivateKey()
	var copies []rawstore.Copy
	for i := 0; i < 300; i++ {
		e := signed(t, sk, strings.Repeat("x", i), int64(1000+i))
		raw := event.AppendJSON(nil, e)
		if i%10 == 0 {
			raw = bytes.Replace(raw, []byte(`"kind":1`), []byte(`"kind":2`), 1)
		}
		copies = append(copies, rawstore.Copy{ID: e.ID, Raw: raw})
	}
	if _, err := st.Ingest(&rawstore.Batch{Relay: r, Events: copies}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	p, err := New(Options{Store: st, BatchSize: 64, Workers: 3, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	n, err := p.Drain(context.Background())
	if err != nil || n != 300 {
		t.Fatalf("Drain = %d, %v", n, err)
	}
	s, _ := st.Stats()
	if s.Valid != 270 || s.Invalid != 30 || s.Pending != 0 || s.InvalidCopies[ReasonIDMismatch] != 30 {
		t.Fatalf("stats %+v", s)
	}
	if got := testutil.ToFloat64(m.verdicts.WithLabelValues("valid")); got != 270 {
		t.Fatalf("valid metric %v", got)
	}
	exported := 0
	_ = st.ForEachValid(func(id [32]byte, raw []byte) error {
		exported++
		if bytes.Contains(raw, []byte(`"kind":2`)) {
			t.Errorf("tampered event %x exported", id[:4])
		}
		return nil
	})
	if exported != 270 {
		t.Fatalf("exported %d", exported)
	}
}

// After ResetVerdicts nothing is queued: Run (the daemon's loop) must scan
// before it waits on the queue, or the archive would stay pending forever.
func TestRunScansAfterReset(t *testing.T) {
	st, r := openStore(t, rawstore.Options{})
	sk, _ := btcec.NewPrivateKey()
	ingestSigned(t, st, r, sk, 200, "reset ")
	p, err := New(Options{Store: st, BatchSize: 50, Idle: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ResetVerdicts(); err != nil {
		t.Fatal(err)
	}
	runUntilVerified(t, p, st, 200, "Run after a reset")
}

// runUntilVerified runs p until st holds valid verified events, nothing
// pending and nothing left to scan, and stops it; it fails the test if
// that takes 20 s. The store is polled: a batch's verdicts may be applied
// after the pool reports it judged.
func runUntilVerified(t *testing.T, p *Pool, st *rawstore.Store, valid int64, what string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s, _ := st.Stats()
		if s.Valid == valid && s.Pending == 0 && !st.NeedsScan() {
			break
		}
		select {
		case <-deadline:
			cancel()
			<-done
			t.Fatalf("%s: %+v, NeedsScan %v", what, s, st.NeedsScan())
		case <-tick.C:
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Run's passes take only copies still in memory; what they leave behind
// (here: nearly everything, the hot budget holding a few copies) must be
// verified by a full pass once the queue is caught up.
func TestRunVerifiesWhatMemoryDropped(t *testing.T) {
	st, r := openStore(t, rawstore.Options{HotBytes: 4 << 10})
	sk, _ := btcec.NewPrivateKey()
	p, err := New(Options{Store: st, BatchSize: 32, Idle: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	for b := range 10 {
		ingestSigned(t, st, r, sk, 30, fmt.Sprint("cold ", b, " "))
		p.Notify()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, _ := st.Stats()
		if s.Valid == 300 && s.Pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("Run left copies unverified: %+v", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Run stops within a batch of its context ending, however long the backlog:
// from memory (hot) and read back from disk (cold, nothing kept in memory).
func TestRunStopsPromptlyWithBacklog(t *testing.T) {
	for _, tc := range []struct {
		name string
		hot  int
	}{{"hot", 64 << 20}, {"cold", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			opt := goleak.IgnoreCurrent()
			t.Cleanup(func() { goleak.VerifyNone(t, opt) }) // after the store's Cleanup
			st, r := openStore(t, rawstore.Options{HotBytes: tc.hot})
			// Unsigned events with true ids: the verifier below judges them,
			// slowly, as a large backlog on a busy machine would be judged.
			const n = 4000
			copies := make([]rawstore.Copy, n)
			for i := range copies {
				e := &event.Event{CreatedAt: int64(1000 + i), Kind: 1, Tags: [][]string{}, Content: fmt.Sprint("backlog ", i)}
				e.ID, _ = e.ComputeID(nil)
				copies[i] = rawstore.Copy{ID: e.ID, Raw: event.AppendJSON(nil, e)}
			}
			if _, err := st.Ingest(&rawstore.Batch{Relay: r, Events: copies}); err != nil {
				t.Fatal(err)
			}
			started := make(chan struct{})
			var once sync.Once
			slow := func() Verifier {
				return func(items []bip340.Item, reasons []string) {
					once.Do(func() { close(started) })
					time.Sleep(20 * time.Millisecond) // the cost of a batch
					clear(reasons)
				}
			}
			p, err := New(Options{Store: st, BatchSize: 16, Workers: 1, NewVerifier: slow, Idle: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()
			p.Notify()
			<-started
			cancel()
			stopAt := time.Now()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second): // the whole backlog takes 5 s
				t.Fatal("Run did not stop after its context ended")
			}
			if el := time.Since(stopAt); el > time.Second {
				t.Errorf("Run took %v to stop", el)
			}
			if s, _ := st.Stats(); s.Pending < n/2 {
				t.Errorf("Run went on after the stop: %d of %d still pending", s.Pending, n)
			}
		})
	}
}

// ScannedLater is true exactly when the key-order scan will read the
// backlog whatever is added unverified; copies a store leaves unqueued
// then are all verified, by Drain and by Run.
func TestScannedLater(t *testing.T) {
	st, r := openStore(t, rawstore.Options{})
	sk, _ := btcec.NewPrivateKey()
	later := func(want bool, when string) {
		t.Helper()
		if got, err := ScannedLater(st); err != nil || got != want {
			t.Fatalf("%s: ScannedLater = %v, %v; want %v", when, got, err, want)
		}
	}
	later(true, "empty archive")
	p, err := New(Options{Store: st, BatchSize: 50, Idle: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ingestSigned(t, st, r, sk, 160, "queued ")
	if _, err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	later(false, "160 verified")
	ingestSigned(t, st, r, sk, 10, "more ")
	later(false, "10 pending of 170")
	ingestSigned(t, st, r, sk, 20, "more yet ")
	later(true, "30 pending of 190")

	st.LeaveUnqueued()
	ingestSigned(t, st, r, sk, 40, "unqueued ")
	later(true, "unqueued copies")
	if !st.NeedsScan() {
		t.Fatal("unqueued copies stored, NeedsScan false")
	}
	if q, err := st.NextPending(0, 1000); err != nil || len(q) != 30 {
		t.Fatalf("queue holds %d entries, %v; want the 30 queued before", len(q), err)
	}
	runUntilVerified(t, p, st, 230, "Run over unqueued copies")
	later(false, "all verified")
}
