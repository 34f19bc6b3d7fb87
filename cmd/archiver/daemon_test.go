package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/daemon"
	"github.com/nostr-archiver/archiver/testrelay"
)

// runningDaemon is an `archiver run` process under test.
type runningDaemon struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	done   chan error
}

// syncBuffer is a bytes.Buffer the exec copier writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startDaemon starts `archiver run` on a port of its choosing (a port
// found free and closed could be another test's by the time the daemon
// binds it) and waits until its HTTP endpoints answer at the address it
// logs.
func startDaemon(t *testing.T, args ...string) *runningDaemon {
	t.Helper()
	cmd := archiver(append([]string{"run", "--listen", "127.0.0.1:0"}, args...)...)
	// The environment's own tunables (see childEnv): the daemon re-executes
	// itself for huge pages, and is signalled and stopped after that.
	cmd.Env = append(cmd.Env, "GLIBC_TUNABLES="+os.Getenv("GLIBC_TUNABLES"))
	d := &runningDaemon{t: t, cmd: cmd, stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-d.done
		}
	})
	d.waitFor("the HTTP endpoints", 30*time.Second, func() bool {
		if d.addr = loggedField(d.stderr.String(), "archiver running", "listen"); d.addr == "" {
			return false
		}
		resp, err := http.Get("http://" + d.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	return d
}

// loggedField returns the string field of the first JSON log line with
// message msg, or "".
func loggedField(log, msg, field string) string {
	for _, l := range strings.Split(log, "\n") {
		var v map[string]any
		if json.Unmarshal([]byte(l), &v) == nil && v["msg"] == msg {
			s, _ := v[field].(string)
			return s
		}
	}
	return ""
}

func (d *runningDaemon) status() *daemon.Status {
	resp, err := http.Get("http://" + d.addr + "/status")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var st daemon.Status
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return nil
	}
	return &st
}

// metric scrapes /metrics for one sample by its full name with labels.
func (d *runningDaemon) metric(name string) float64 {
	resp, err := http.Get("http://" + d.addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			v, _ := strconv.ParseFloat(rest, 64)
			return v
		}
	}
	return -1
}

func (d *runningDaemon) waitFor(what string, timeout time.Duration, cond func() bool) {
	d.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-d.done:
			d.t.Fatalf("daemon exited (%v) while waiting for %s:\n%s", err, what, tail(d.stderr.String()))
		default:
		}
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.t.Fatalf("timed out waiting for %s:\n%s", what, tail(d.stderr.String()))
}

// stop sends sig and waits for the exit; SIGTERM must exit 0 in time.
func (d *runningDaemon) stop(sig syscall.Signal) {
	d.t.Helper()
	_ = d.cmd.Process.Signal(sig)
	select {
	case err := <-d.done:
		if sig == syscall.SIGTERM && err != nil {
			d.t.Fatalf("SIGTERM: exit %v\n%s", err, tail(d.stderr.String()))
		}
	case <-time.After(60 * time.Second):
		d.t.Fatalf("no exit within 60s of %v", sig)
	}
}

func relayDone(url string) func(st *daemon.Status) bool {
	return func(st *daemon.Status) bool {
		for _, r := range st.Relays {
			if r.Relay.URL == url {
				return r.BackfillComplete
			}
		}
		return false
	}
}

func (d *runningDaemon) waitStatus(what string, cond func(*daemon.Status) bool) {
	d.t.Helper()
	d.waitFor(what, 2*time.Minute, func() bool {
		st := d.status()
		return st != nil && cond(st)
	})
}

func allVerified(n int) func(*daemon.Status) bool {
	return func(st *daemon.Status) bool { return st.Valid == int64(n) && st.Pending == 0 }
}

// SIGTERM mid-crawl stops cleanly (exit 0, Pebble closed), kill -9 loses
// nothing either, and a restart resumes each time until the relay is
// archived; the metrics move with the crawl.
func TestDaemonStopAndResume(t *testing.T) {
	t.Parallel()
	f := fixture(t, testrelay.FixtureOptions{Seed: 11, Events: 3000, ForgedIDs: 5, BadSigs: 5})
	r := relay(t, testrelay.Options{MaxLimit: 100, Latency: 40 * time.Millisecond}, f)
	data := t.TempDir()

	d := startDaemon(t, "--data", data, "--relay", r.URL())
	d.waitStatus("first events", func(st *daemon.Status) bool { return st.Events > 200 })
	first := d.metric(fmt.Sprintf(`archiver_crawl_events_total{relay=%q}`, r.URL()))
	d.waitFor("the event counter to move", 30*time.Second, func() bool {
		return d.metric(fmt.Sprintf(`archiver_crawl_events_total{relay=%q}`, r.URL())) > first
	})
	if first <= 0 {
		t.Fatalf("archiver_crawl_events_total = %v after events were stored", first)
	}
	d.stop(syscall.SIGTERM)
	if !strings.Contains(d.stderr.String(), `"msg":"stopped"`) {
		t.Fatalf("no clean stop logged:\n%s", tail(d.stderr.String()))
	}

	d = startDaemon(t, "--data", data, "--relay", r.URL())
	d.waitStatus("more events", func(st *daemon.Status) bool { return st.Events > 1500 })
	d.stop(syscall.SIGKILL)

	d = startDaemon(t, "--data", data, "--relay", r.URL())
	d.waitStatus("backfill complete", func(st *daemon.Status) bool { return relayDone(r.URL())(st) && allVerified(len(f.Valid))(st) })
	if v := d.metric("archiver_events_valid"); v != float64(len(f.Valid)) {
		t.Errorf("archiver_events_valid = %v, want %d", v, len(f.Valid))
	}
	if v := d.metric("archiver_verify_backlog"); v != 0 {
		t.Errorf("archiver_verify_backlog = %v", v)
	}
	st := d.status()
	if st.InvalidCopies["id-mismatch"] != 5 || st.InvalidCopies["bad-sig"] != 5 {
		t.Errorf("invalid copies %v", st.InvalidCopies)
	}
	d.stop(syscall.SIGTERM)
	assertExport(t, data, f)
}

// SIGHUP picks up a relay added to the configuration without restarting
// the running one.
func TestDaemonReloadAddsRelay(t *testing.T) {
	t.Parallel()
	fa := fixture(t, testrelay.FixtureOptions{Seed: 12, Events: 800})
	fb := fixture(t, testrelay.FixtureOptions{Seed: 13, Events: 600})
	ra := relay(t, testrelay.Options{}, fa)
	rb := relay(t, testrelay.Options{}, fb)
	dir := t.TempDir()
	conf := filepath.Join(dir, "archiver.toml")
	write := func(relays ...string) {
		var b strings.Builder
		fmt.Fprintf(&b, "data_dir = %q\n", filepath.Join(dir, "data"))
		for _, u := range relays {
			fmt.Fprintf(&b, "[[relay]]\nurl = %q\n", u)
		}
		if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(ra.URL())
	d := startDaemon(t, "--config", conf)
	d.waitStatus("relay A archived", func(st *daemon.Status) bool { return relayDone(ra.URL())(st) && allVerified(len(fa.Valid))(st) })

	write(ra.URL(), rb.URL())
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitStatus("relay B archived", func(st *daemon.Status) bool {
		return relayDone(rb.URL())(st) && allVerified(len(fa.Valid)+len(fb.Valid))(st)
	})
	st := d.status()
	for _, rs := range st.Relays {
		if rs.Relay.URL == ra.URL() && rs.Passes != 1 {
			t.Errorf("relay A restarted by the reload: %d passes", rs.Passes)
		}
	}
	// A configuration that does not validate is refused; the daemon runs on.
	if err := os.WriteFile(conf, []byte("data_dir = 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitFor("the refused reload to be logged", 10*time.Second, func() bool {
		return strings.Contains(d.stderr.String(), "reload refused")
	})
	if st := d.status(); st == nil || len(st.Relays) != 2 {
		t.Fatalf("status after a refused reload: %+v", st)
	}
	d.stop(syscall.SIGTERM)
}

// A bad configuration exits 2 (systemd does not restart it) and says
// everything that is wrong with it at once.
func TestDaemonBadConfig(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "bad.toml")
	_ = os.WriteFile(conf, []byte("data_dir = \"/tmp/x\"\nlisten = 9477\nbogus_key = 1\n[limits]\npage_timeout = 15\n[[relay]]\nurl = \"ftp://x\"\n"), 0o644)
	out, err := archiver("run", "--config", conf).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("exit %v, want 2\n%s", err, out)
	}
	// Every problem at once, wrong types included.
	for _, want := range []string{"bogus_key: unknown key", "relay[0].url", "listen: ", "limits.page_timeout: want a duration"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("error output lacks %q:\n%s", want, out)
		}
	}
}
