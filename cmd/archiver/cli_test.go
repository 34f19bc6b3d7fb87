package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// run runs the archiver in dir and returns its exit code, stdout, stderr
// and how long it took.
func run(t *testing.T, dir string, args ...string) (code int, stdout, stderr string, took time.Duration) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := archiver(args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &out, &errb
	start := time.Now()
	err := cmd.Run()
	took = time.Since(start)
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("archiver %v: %v", args, err)
	}
	return code, out.String(), errb.String(), took
}

// forPeople fails unless s reads as messages for a person: no JSON log
// line, no Go stack.
func forPeople(t *testing.T, what, s string) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if strings.HasPrefix(l, "{") || strings.Contains(l, "goroutine ") || strings.Contains(l, ".go:") {
			t.Errorf("%s: not for people: %q", what, l)
		}
	}
}

// refusedURL returns a ws:// URL on a loopback port that refuses every
// connection for the rest of the test: a socket bound to the port and
// never listening holds it. (A listener closed at once would free it for
// the next relay a parallel test starts: TestLogFormat once crawled
// another test's relay that way.)
func refusedURL(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("ws://127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// Bad input at the door is a usage error (exit 2) with its reason in one
// line, found before anything is dialed or created: neither --data nor
// the default ./archive appears.
func TestBadInputAtTheDoor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ws://127.0.0.1:99999"}, `port "99999" is not a number from 1 to 65535`},
		{[]string{"not a url"}, "contains a space"},
		{[]string{"ftp://relay.example"}, `scheme "ftp" is not ws or wss`},
		{[]string{"https://relay.example/nostr"}, "write wss://relay.example/nostr"},
		{[]string{"wss://"}, "no host"},
		{[]string{"ws://127.0.0.1:0"}, `port "0"`},
		{[]string{"ws://user:pw@relay.example"}, "no user or password"},
		{[]string{"wss://relay.example", "ws://127.0.0.1:70000"}, `"ws://127.0.0.1:70000"`}, // the second of two
		{[]string{"--since", "yesterday-ish", "wss://relay.example"}, "--since"},
		{[]string{"--kinds", "70000", "wss://relay.example"}, "--kinds"},
		{[]string{"--authors", "npub1xyz", "wss://relay.example"}, "--authors"},
		{[]string{"--inflight", "-1", "wss://relay.example"}, "in-flight"},
		{[]string{"--since", "2025-01-02", "--until", "2025-01-01", "wss://relay.example"}, "before since"},
		{[]string{"--log-format", "xml", "wss://relay.example"}, `--log-format "xml"`},
		{[]string{}, "no relay given"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			for _, data := range []string{"", "mistyped/archive"} {
				dir := t.TempDir()
				args := append([]string{"crawl"}, tc.args...)
				if data != "" {
					args = append(args, "--data", data)
				}
				code, _, stderr, took := run(t, dir, args...)
				if code != 2 {
					t.Errorf("exit %d, want 2\n%s", code, stderr)
				}
				if !strings.Contains(stderr, tc.want) {
					t.Errorf("stderr lacks %q:\n%s", tc.want, stderr)
				}
				forPeople(t, "stderr", stderr)
				if took > 5*time.Second {
					t.Errorf("took %v: it dialed or waited", took)
				}
				if entries, _ := os.ReadDir(dir); len(entries) > 0 {
					t.Errorf("created %s in the working directory", entries[0].Name())
				}
			}
		})
	}
}

// A relay that cannot be reached fails fast and says what to try next: an
// unknown host at once, a refused port after a few quick retries.
func TestUnreachableSaysWhatToTry(t *testing.T) {
	t.Parallel()
	refused := refusedURL(t)
	for _, tc := range []struct {
		url      string
		hint     string
		within   time.Duration
		resolved bool // the hint depends on the machine's DNS
	}{
		{refused, "check the port, or the relay may be down", 10 * time.Second, false},
		{"wss://no-such-relay.invalid", "check the address", 15 * time.Second, true},
	} {
		t.Run(tc.url, func(t *testing.T) {
			code, _, stderr, took := run(t, t.TempDir(), "crawl", "--data", t.TempDir(), "--log-format", "console", tc.url)
			if code != 1 {
				t.Errorf("exit %d, want 1\n%s", code, stderr)
			}
			if !strings.Contains(stderr, tc.url+": unreachable") || !strings.Contains(stderr, tc.hint) {
				t.Errorf("no result with the hint %q:\n%s", tc.hint, stderr)
			}
			if took > tc.within {
				t.Errorf("took %v, want under %v", took, tc.within)
			}
			forPeople(t, "stderr", stderr)
		})
	}
}

// Every command answers -h and --help with its usage and exit 0.
func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	cmds := [][]string{{"--help"}, {"-h"}, {"help"}}
	for _, c := range []string{"run", "crawl", "reprocess", "export", "import", "show", "relays", "stats", "check", "repair", "sync", "submit", "jobs", "version", "serve"} {
		cmds = append(cmds, []string{c, "--help"}, []string{c, "-h"})
	}
	dir := t.TempDir()
	for _, args := range cmds {
		code, stdout, stderr, _ := run(t, dir, args...)
		if code != 0 || !strings.Contains(stdout+stderr, "Usage") {
			t.Errorf("archiver %v: exit %d\n%s%s", args, code, stdout, stderr)
		}
		if strings.Contains(stderr, "unexpected arguments") {
			t.Errorf("archiver %v: %s", args, stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("--help created %s", entries[0].Name())
	}
	// Usage errors stay exit 2.
	for _, args := range [][]string{{}, {"frobnicate"}, {"crawl", "--bogus"}, {"stats", "extra"}, {"version", "extra"}, {"serve", "--cache", "12XB"}} {
		if code, _, stderr, _ := run(t, dir, args...); code != 2 {
			t.Errorf("archiver %v: exit %d, want 2\n%s", args, code, stderr)
		}
	}
}

// `archiver version` and --version name the module version, the VCS
// revision the binary was built from (as `go version -m` reads it from
// the binary; builds with -buildvcs=false have none, and say so), and the
// Go version.
func TestVersion(t *testing.T) {
	t.Parallel()
	info, err := exec.Command("go", "version", "-m", binary).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "(no VCS revision)"
	for _, l := range strings.Split(string(info), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision=") {
			want = "(" + strings.TrimPrefix(f[1], "vcs.revision=")
		}
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, stderr, _ := run(t, t.TempDir(), args...)
		if code != 0 || !strings.HasPrefix(stdout, "archiver (devel) ") && !strings.HasPrefix(stdout, "archiver v") ||
			!strings.Contains(stdout, " go1.") || !strings.Contains(stdout, want) {
			t.Errorf("archiver %v: exit %d, %q (want %q in it) %q", args, code, stdout, want, stderr)
		}
	}
}

// --log-format picks the log's form; without a terminal, auto is JSON.
func TestLogFormat(t *testing.T) {
	t.Parallel()
	url := refusedURL(t)
	for _, format := range []string{"auto", "json", "console"} {
		_, _, stderr, _ := run(t, t.TempDir(), "crawl", "--data", t.TempDir(), "--log-format", format, url)
		var logLines, jsonLines int
		for _, l := range strings.Split(stderr, "\n") {
			if strings.Contains(l, "connect failed") {
				logLines++
				var v map[string]any
				if json.Unmarshal([]byte(l), &v) == nil {
					jsonLines++
				}
			}
			if strings.Contains(l, "stacktrace") || strings.Contains(l, "goroutine ") {
				t.Errorf("%s: a stack in %q", format, l)
			}
		}
		wantJSON := format != "console"
		if logLines == 0 || (jsonLines == logLines) != wantJSON || (jsonLines == 0) == wantJSON {
			t.Errorf("%s: %d of %d log lines are JSON\n%s", format, jsonLines, logLines, stderr)
		}
	}
}

// `jobs` on a queue without jobs prints [] (JSON, never null) and says so.
func TestJobsEmpty(t *testing.T) {
	t.Parallel()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	code, stdout, stderr, _ := run(t, t.TempDir(), "jobs", "--nats", ns.ClientURL())
	if code != 0 || strings.TrimSpace(stdout) != "[]" || !strings.Contains(stderr, "no jobs") {
		t.Fatalf("jobs: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr, _ := run(t, t.TempDir(), "jobs"); code != 2 || !strings.Contains(stderr, "--nats is required") {
		t.Fatalf("jobs without --nats: exit %d, %q", code, stderr)
	}
}

// The archive directory of a crawl that failed at the door is not there;
// one of a crawl that ran is (a sanity check of the check above).
func TestCrawlCreatesArchiveOnlyWhenItRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if code, _, stderr, _ := run(t, dir, "crawl", "--data", "a", "ws://127.0.0.1:99999"); code != 2 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	run(t, dir, "crawl", "--data", "b", refusedURL(t))
	if _, err := os.Stat(filepath.Join(dir, "a")); err == nil {
		t.Error("the refused crawl created its archive")
	}
	if _, err := os.Stat(filepath.Join(dir, "b")); err != nil {
		t.Errorf("the crawl that ran has no archive: %v", err)
	}
}
