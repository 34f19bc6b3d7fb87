package main

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/status"
	"github.com/nostr-archiver/archiver/testrelay"
)

// binary is the archiver built once for the process tests. Tests that
// only run archiver processes (daemons included) on temp dirs, relays and
// ports of their own are t.Parallel, so that their waits (process start,
// fsync, relay latency) overlap; those that mount file systems or set this
// process's globals stay serial. A port a test needs refused is held by
// refusedURL, and daemons listen on ports they pick (startDaemon): a port
// found free and closed can be another parallel test's a moment later.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "archiver-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "archiver")
	// -w: no DWARF, which nothing here reads (stacks and race reports
	// come from the runtime's own tables). The go command caches a link
	// without it, so a rebuild of an unchanged archiver is a copy, not 5 s.
	args := []string{"build", "-ldflags=-w", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building archiver: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func fixture(t *testing.T, o testrelay.FixtureOptions) *testrelay.Fixture {
	t.Helper()
	if dir, err := os.UserCacheDir(); err == nil {
		o.CacheDir = filepath.Join(dir, "archiver-test-fixtures")
	}
	f, err := testrelay.Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func relay(t *testing.T, o testrelay.Options, f *testrelay.Fixture) *testrelay.Relay {
	t.Helper()
	r, err := testrelay.New(o)
	if err != nil {
		t.Fatal(err)
	}
	r.Add(f.Items...)
	t.Cleanup(func() { r.Close() })
	return r
}

func archiver(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Env = childEnv()
	return cmd
}

// childEnv is the environment of an archiver process under test. The race
// runtime sleeps a second at exit by default (atexit_sleep_ms) in case a
// goroutine still reports: a second of every command, most of what this
// package's tests took (TestHelpExitsZero: 48 s, 1.3 s per command).
// GLIBC_TUNABLES asks for huge pages already, as the archiver otherwise
// re-executes itself to (useHugePages): a second start of a race-built
// binary, 0.1 s of CPU for each of the package's ~230 commands. The
// daemons start without it (startDaemon), so that the re-execution stays
// under test.
func childEnv() []string {
	tunables, _ := withHugePages(os.Getenv("GLIBC_TUNABLES"))
	return append(os.Environ(), "GORACE=halt_on_error=1 atexit_sleep_ms=0", "GLIBC_TUNABLES="+tunables)
}

// exportLines runs `archiver export` and returns its lines by id.
func exportLines(t *testing.T, data string) map[string][]byte {
	t.Helper()
	var out, stderr bytes.Buffer
	cmd := archiver("export", "--data", data)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr.String())
	}
	lines := map[string][]byte{}
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		e, err := event.Parse(sc.Bytes())
		if err != nil {
			t.Fatalf("export line does not parse: %v: %s", err, sc.Bytes())
		}
		lines[hex.EncodeToString(e.ID[:])] = append([]byte(nil), sc.Bytes()...)
	}
	return lines
}

func assertExport(t *testing.T, data string, f *testrelay.Fixture) {
	t.Helper()
	got := exportLines(t, data)
	for _, v := range f.Valid {
		id := hex.EncodeToString(v.ID[:])
		line, ok := got[id]
		switch {
		case !ok:
			t.Errorf("valid event %s not exported", id)
		case !bytes.Equal(line, v.Line):
			t.Errorf("event %s exported as\n%s\nwant\n%s", id, line, v.Line)
		}
		delete(got, id)
	}
	for id := range got {
		t.Errorf("exported %s, not a valid event of the relay", id)
	}
}

// kill -9 at random instants, again and again; the last run completes and
// the archive holds exactly the relay's valid set.
func TestKill9Resume(t *testing.T) {
	t.Parallel()
	f := fixture(t, testrelay.FixtureOptions{Seed: 7, Events: 6000, ForgedIDs: 10, BadSigs: 10, Duplicates: 20, Varied: 50})
	r := relay(t, testrelay.Options{MaxLimit: 100, Latency: 25 * time.Millisecond}, f)
	data := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 7))
	kills := 0
	for i := 0; i < 6; i++ {
		cmd := archiver("crawl", "--data", data, "--limit", "100", r.URL())
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			t.Logf("run %d finished before the kill: %v", i, err)
		case <-time.After(time.Duration(200+rng.IntN(1200)) * time.Millisecond):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-done
			kills++
		}
	}
	if kills == 0 {
		t.Fatal("no run was killed: the test proves nothing")
	}
	cmd := archiver("crawl", "--data", data, "--limit", "100", r.URL())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("final crawl: %v\n%s", err, tail(stderr.String()))
	}
	t.Logf("%d kills; final run: %s", kills, tail(stderr.String()))
	assertExport(t, data, f)
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-4):], "\n")
}

// The commands a user runs, end to end: crawl, stats, export, reprocess.
func TestCommands(t *testing.T) {
	t.Parallel()
	f := fixture(t, testrelay.FixtureOptions{Seed: 3, Events: 1500, ForgedIDs: 6, BadSigs: 4, Malformed: 3, Wall: 900})
	r := relay(t, testrelay.Options{MaxLimit: 200, SupportCount: true}, f)
	data := t.TempDir()

	// Bare host:port means wss://, which this relay does not speak: the
	// crawl must fail with a reason naming the relay, not hang.
	var stderr bytes.Buffer
	cmd := archiver("crawl", "--data", data, "--page-timeout", "2s", strings.TrimPrefix(r.URL(), "ws://"))
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatal("crawl of a wss:// URL on a plain ws relay exited 0")
	} else if !strings.Contains(stderr.String(), "wss://"+strings.TrimPrefix(r.URL(), "ws://")) {
		t.Fatalf("failure does not name the relay:\n%s", tail(stderr.String()))
	}

	stderr.Reset()
	cmd = archiver("crawl", "--data", data, r.URL())
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("crawl: %v\n%s", err, tail(stderr.String()))
	}
	if !strings.Contains(stderr.String(), r.URL()+": drained") {
		t.Fatalf("crawl output lacks the relay's finish:\n%s", tail(stderr.String()))
	}
	assertExport(t, data, f)

	rep, out := statsJSON(t, data)
	if rep.Valid != int64(len(f.Valid)) || rep.Pending != 0 || rep.InvalidCopies["id-mismatch"] != 6 || rep.InvalidCopies["bad-sig"] != 4 {
		t.Fatalf("stats: %s", out)
	}
	var rel *status.Relay
	for i := range rep.Relays {
		if rep.Relays[i].URL == r.URL() {
			rel = &rep.Relays[i]
		}
	}
	if rel == nil || rel.Finish != "drained" || rel.Pages == 0 || len(rel.Walls) != 1 || !rel.Walls[0].Complete {
		t.Fatalf("relay stats: %s", out)
	}

	// reprocess --all forgets every verdict and reaches the same ones.
	if out, err := archiver("reprocess", "--data", data, "--all").CombinedOutput(); err != nil {
		t.Fatalf("reprocess: %v\n%s", err, out)
	}
	out2, _ := archiver("stats", "--data", data, "--json").Output()
	var rep2 status.Report
	_ = json.Unmarshal(out2, &rep2)
	if rep2.Valid != rep.Valid || rep2.Invalid != rep.Invalid || rep2.Pending != 0 {
		t.Fatalf("after reprocess --all: valid %d invalid %d pending %d; before %d %d", rep2.Valid, rep2.Invalid, rep2.Pending, rep.Valid, rep.Invalid)
	}

	// Unknown flags and commands are usage errors (exit 2).
	for _, args := range [][]string{{"crawl", "--bogus", r.URL()}, {"frobnicate"}, {"crawl"}, {"crawl", "--since", "yesterday-ish", r.URL()}, {"crawl", "--authors", "npub1xyz", r.URL()}} {
		err := archiver(args...).Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("archiver %v: %v, want exit 2", args, err)
		}
	}
}

// A crawl that verifies nothing, then reprocess: the archive it leaves is
// verified to the event, whether the crawl queued its copies (a small
// addition to a verified archive) or left them to the key-order scan
// (a fresh archive, whose whole backlog the scan reads).
func TestNoVerifyThenReprocess(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	var valid int64
	var all testrelay.Fixture // what both relays serve valid
	for i, fo := range []testrelay.FixtureOptions{
		{Seed: 7, Events: 1200, ForgedIDs: 5, BadSigs: 3}, // into an empty archive: left to the scan
		{Seed: 8, Events: 100, BadSigs: 2},                // 102 copies next to 1,200 verified: queued
	} {
		f := fixture(t, fo)
		r := relay(t, testrelay.Options{MaxLimit: 300}, f)
		if code, _, stderr := runFor(t, 2*time.Minute, "crawl", "--data", data, "--no-verify", r.URL()); code != 0 {
			t.Fatalf("crawl %d: exit %d\n%s", i, code, tail(stderr))
		}
		if rep, _ := statsJSON(t, data); rep.Valid != valid || rep.Pending == 0 {
			t.Fatalf("crawl %d without verifying: %d valid, %d pending; want %d valid and some pending", i, rep.Valid, rep.Pending, valid)
		}
		if code, _, stderr := runFor(t, 2*time.Minute, "reprocess", "--data", data); code != 0 {
			t.Fatalf("reprocess %d: exit %d\n%s", i, code, tail(stderr))
		}
		all.Valid = append(all.Valid, f.Valid...)
		assertExport(t, data, &all)
		valid += int64(len(f.Valid))
		if rep, _ := statsJSON(t, data); rep.Valid != valid || rep.Pending != 0 || rep.InvalidCopies["bad-sig"] != int64(3+2*i) {
			t.Fatalf("after reprocess %d: %d valid (want %d), %d pending, invalid %v", i, rep.Valid, valid, rep.Pending, rep.InvalidCopies)
		}
	}
}

// statsJSON is `archiver stats --json` of data, decoded, and as printed.
func statsJSON(t *testing.T, data string) (status.Report, []byte) {
	t.Helper()
	out, err := archiver("stats", "--data", data, "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var rep status.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
	return rep, out
}
