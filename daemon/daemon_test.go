package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/testrelay"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

// client keeps no idle connections, so the leak check sees none.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// cachedFixture is testrelay.Generate with the fixture cached across runs.
func cachedFixture(t *testing.T, o testrelay.FixtureOptions) *testrelay.Fixture {
	t.Helper()
	if cache, err := os.UserCacheDir(); err == nil {
		o.CacheDir = filepath.Join(cache, "archiver-test-fixtures")
	}
	f, err := testrelay.Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// serveItems starts a test relay (o) serving items, closed when the test
// ends.
func serveItems(t *testing.T, o testrelay.Options, items []testrelay.Item) *testrelay.Relay {
	t.Helper()
	r, err := testrelay.New(o)
	if err != nil {
		t.Fatal(err)
	}
	r.Add(items...)
	t.Cleanup(func() { r.Close() })
	return r
}

func getStatus(t *testing.T, addr string) *Status {
	resp, err := client.Get("http://" + addr + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// Under the disk floor nothing is crawled and the daemon says why; when
// space returns the crawl resumes and completes.
func TestDiskFloorPausesCrawl(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	f := cachedFixture(t, testrelay.FixtureOptions{Seed: 21, Events: 1500})
	r := serveItems(t, testrelay.Options{}, f.Items)

	cfg, err := config.Load("", config.Overrides{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Relays: []string{r.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	var free atomic.Uint64
	free.Store(1 << 20) // 1 MiB: under the default 1 GiB floor
	// Checked every 50 ms, not every 10 s: the crawl resumes as soon as
	// space returns, and the pause below outlasts many checks.
	d, err := New(Options{Config: cfg, Logger: zaptest.NewLogger(t), Statfs: func(string) (uint64, error) { return free.Load(), nil },
		DiskInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	time.Sleep(1500 * time.Millisecond)
	st := getStatus(t, d.Addr())
	if !st.Disk.Paused || st.Events != 0 {
		t.Fatalf("under the floor: paused=%v events=%d", st.Disk.Paused, st.Events)
	}
	resp, err := client.Get("http://" + d.Addr() + "/healthz")
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("healthz while paused: %v %v", resp, err)
	}
	resp.Body.Close()

	free.Store(100 << 30)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		st = getStatus(t, d.Addr())
		if st.Valid == int64(len(f.Valid)) && st.Pending == 0 && !st.Disk.Paused {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("after space returned: %+v", st.Report)
}

// A stop whose timeout passes while relays are committing pages and the
// verify pool has a backlog must not close Pebble under them (Pebble
// panics on a write after Close): Run returns the timeout, the store is
// closed once the writers are out, and it opens again with what was
// committed.
func TestStopTimeoutWithBusyWriters(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	f := cachedFixture(t, testrelay.FixtureOptions{Seed: 7, Events: 6000, ForgedIDs: 10, BadSigs: 10, Duplicates: 20, Varied: 50})
	r := serveItems(t, testrelay.Options{MaxLimit: 50}, f.Items) // many small pages: commits all the time
	dir := t.TempDir()
	cfg, err := config.Load("", config.Overrides{DataDir: dir, Listen: "127.0.0.1:0", Relays: []string{r.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Limits.StopTimeout = config.Duration(time.Millisecond)
	cfg.Limits.MinFreeDiskBytes = 0
	d, err := New(Options{Config: cfg, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	for {
		st := getStatus(t, d.Addr())
		if st.Events >= 500 && st.Pending > 0 {
			break
		}
		if st.Events == int64(len(f.Valid)) {
			t.Fatal("the crawl finished before the stop: nothing was busy")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err = <-done:
	case <-time.After(closeGrace + 30*time.Second):
		t.Fatal("Run did not return")
	}
	if err != nil && !strings.Contains(err.Error(), "stop timeout") {
		t.Fatalf("Run: %v", err)
	}
	st, err := rawstore.Open(rawstore.Options{Dir: dir})
	if err != nil {
		t.Fatalf("the archive was not closed after the writers returned: %v", err)
	}
	defer st.Close()
	if s, err := st.Stats(); err != nil || s.Events < 500 {
		t.Fatalf("after the stop: %+v, %v", s, err)
	}
}

// A relay's authors filter is honored: the daemon archives that author's
// events, all of them, and nobody else's.
func TestRelayAuthorsFilter(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	f := cachedFixture(t, testrelay.FixtureOptions{Seed: 21, Events: 1500})
	r := serveItems(t, testrelay.Options{}, f.Items)
	author := f.Authors[0]
	want := 0
	for _, v := range f.Valid {
		if bytes.Contains(v.Line, []byte(`"pubkey":"`+author+`"`)) {
			want++
		}
	}
	if want == 0 || want == len(f.Valid) {
		t.Fatalf("fixture: %d of %d events by %s: the test proves nothing", want, len(f.Valid), author)
	}
	dir := t.TempDir()
	cfg, err := config.Load("", config.Overrides{DataDir: dir, Listen: "127.0.0.1:0", Relays: []string{r.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Relays[0].Authors, cfg.Relays[0].Live = []string{author}, false // a bounded job: it stops when done
	cfg.Limits.MinFreeDiskBytes = 0
	d, err := New(Options{Config: cfg, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := getStatus(t, d.Addr())
		if len(st.Relays) == 1 && st.Relays[0].State == StateStopped && st.Pending == 0 {
			if rs := st.Relays[0]; rs.LastFinish != "drained" {
				t.Fatalf("finish %s: %s", rs.LastFinish, rs.LastDetail)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st, err := rawstore.Open(rawstore.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got := 0
	err = st.ForEachValid(func(id [32]byte, raw []byte) error {
		got++
		if !bytes.Contains(raw, []byte(author)) {
			t.Errorf("event %x is by another author", id[:4])
		}
		return nil
	})
	if err != nil || got != want {
		t.Fatalf("archived %d valid events, want the author's %d (%v)", got, want, err)
	}
}
