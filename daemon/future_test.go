package daemon

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/rawstore/storetest"
	"github.com/nostr-archiver/archiver/testrelay"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

// Issue 11: the daemon's backfill of an open range archives events dated
// after now (1 minute to 1 day ahead, and centuries ahead), says drained
// only then, and shows how each range was proven in /status. On main it
// archived 1500 of 1555 and said drained.
func TestBackfillArchivesFutureEvents(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	// Dated around the real clock, so not cached: 1,555 signatures.
	now := time.Now().Unix()
	f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 31, Events: 1500, Until: now, Since: now - 7*24*3600, Future: 50, FarFuture: 5})
	if err != nil {
		t.Fatal(err)
	}
	st, dir := backfillOnce(t, testrelay.Options{SupportCount: true}, f.Items)
	rel := st.Relays[0]
	if rel.LastFinish != crawl.FinishDrained || !rel.BackfillComplete || st.Valid != int64(len(f.Valid)) {
		t.Errorf("finish %q with %d of %d valid events", rel.LastFinish, st.Valid, len(f.Valid))
	}
	if len(rel.Coverage) == 0 {
		t.Errorf("/status shows no coverage")
	}
	for _, c := range rel.Coverage {
		if c.Proof != crawl.ProofCount {
			t.Errorf("range %+v not proven by COUNT", c)
		}
	}
	if top := rel.Coverage[len(rel.Coverage)-1]; top.Until != 0 {
		t.Errorf("newest range %+v has an upper bound", top)
	}

	store, err := rawstore.Open(rawstore.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, id := range f.Future {
		if src, err := store.Sources(id); err != nil || len(src) == 0 {
			t.Errorf("future-dated event %s not archived (%v)", hex.EncodeToString(id[:]), err)
		}
	}
}

// A backfill that ends unproven starts nothing it promises: /status says
// why, and backfill_complete stays false.
func TestUnprovenBackfillIsNotComplete(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	f := cachedFixture(t, testrelay.FixtureOptions{Seed: 15, Events: 1000})
	st, _ := backfillOnce(t, testrelay.Options{MaxLimit: 200, SupportCount: true, OmitEvery: 50, OmitForever: true}, f.Items)
	rel := st.Relays[0]
	if rel.LastFinish != crawl.FinishUnproven || rel.BackfillComplete {
		t.Errorf("finish %q, backfill_complete %v: want unproven and not complete", rel.LastFinish, rel.BackfillComplete)
	}
}

// backfillOnce runs a daemon whose one relay (opts, serving items) is
// backfilled without a live tail, until the backfill stopped and every
// event is verified, and returns its last /status and data directory.
func backfillOnce(t *testing.T, opts testrelay.Options, items []testrelay.Item) (*Status, string) {
	t.Helper()
	r := serveItems(t, opts, items)
	dir := t.TempDir()
	return backfillAt(t, r.URL(), dir), dir
}

// backfillAt is backfillOnce of the relay at url into the archive in dir.
func backfillAt(t *testing.T, url, dir string) *Status {
	t.Helper()
	cfg, err := config.Load("", config.Overrides{DataDir: dir, Listen: "127.0.0.1:0", Relays: []string{url}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Relays[0].Live = false // the backfill alone: a live tail has no until and would hide a bounded backfill
	cfg.Limits.MinFreeDiskBytes = 0
	d, err := New(Options{Config: cfg, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var st *Status
	for deadline := time.Now().Add(60 * time.Second); ; {
		st = getStatus(t, d.Addr())
		if len(st.Relays) == 1 && st.Relays[0].State == StateStopped && st.Pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("backfill did not finish: %+v", st.Relays)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	return st
}

// A relay backfilled completely, its archive's log then garbled: the next
// backfill reads back what the first stored, fetches the damaged events
// again and is complete; with the relay no longer serving them, it ends
// `damaged` and backfill_complete is false. Before: the second backfill
// read no body and said complete.
func TestDamagedBackfillIsNotComplete(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	f := cachedFixture(t, testrelay.FixtureOptions{Seed: 16, Events: 1000})
	r := serveItems(t, testrelay.Options{}, f.Items)
	url, dir := r.URL(), t.TempDir()
	st := backfillAt(t, url, dir)
	if rel := st.Relays[0]; rel.LastFinish != crawl.FinishDrained || !rel.BackfillComplete {
		t.Fatalf("first backfill: finish %q, complete %v", rel.LastFinish, rel.BackfillComplete)
	}
	storetest.Garble(t, dir, ".seg", 4096)
	gone := filepath.Join(t.TempDir(), "archive")
	if err := os.CopyFS(gone, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}

	st = backfillAt(t, url, dir)
	if rel := st.Relays[0]; rel.LastFinish != crawl.FinishDrained || !rel.BackfillComplete {
		t.Errorf("backfill over damage the relay serves again: finish %q (%s), complete %v; want drained and complete", rel.LastFinish, rel.LastDetail, rel.BackfillComplete)
	}
	s, err := rawstore.Open(rawstore.Options{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Check()
	s.Close()
	if err != nil || rep.Damaged != 0 {
		t.Errorf("check after the repairing backfill: %v, %d damaged", err, rep.Damaged)
	}

	// The relay no longer serves what it served: the same address, empty.
	r.Close()
	empty, err := testrelay.New(testrelay.Options{Addr: strings.TrimPrefix(url, "ws://")})
	if err != nil {
		t.Fatalf("listen on %s again: %v", url, err)
	}
	defer empty.Close()
	st = backfillAt(t, url, gone)
	if rel := st.Relays[0]; rel.LastFinish != crawl.FinishDamaged || rel.BackfillComplete {
		t.Errorf("backfill over damage the relay no longer serves: finish %q (%s), complete %v; want damaged, not complete", rel.LastFinish, rel.LastDetail, rel.BackfillComplete)
	}
}
