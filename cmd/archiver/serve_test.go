package main

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/daemon"
	"github.com/nostr-archiver/archiver/internal/relayclient"
	"github.com/nostr-archiver/archiver/testrelay"
)

// startServed starts archiver with args and waits for the URL it says
// it serves on; the rest of its stderr arrives on rest once it exits.
func startServed(t *testing.T, args ...string) (cmd *exec.Cmd, url string, rest <-chan string) {
	t.Helper()
	cmd = archiver(args...)
	stderrPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	rd := bufio.NewReader(stderrPipe)
	for url == "" {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("archiver %s ended before serving: %v", args[0], err)
		}
		if _, u, ok := strings.Cut(strings.TrimSpace(line), " on ws://"); ok {
			url = "ws://" + u
		}
	}
	ch := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(rd)
		ch <- string(b)
	}()
	return cmd, url, ch
}

// `archiver crawl` of what `archiver serve` serves from an imported
// archive archives it exactly (byte-equal exports): our crawler against
// our relay, through the binaries; the served archive can still be
// exported meanwhile, and SIGTERM ends serve with exit 0.
func TestServeCrawledBack(t *testing.T) {
	t.Parallel()
	f := fixture(t, testrelay.FixtureOptions{Seed: 15, Events: 400, Authors: 8, Wall: 80, BadSigs: 4, ForgedIDs: 2})
	dir := t.TempDir()
	var in bytes.Buffer
	for _, it := range f.Items {
		in.Write(bytes.ReplaceAll(it.Raw, []byte("\n"), []byte(" ")))
		in.WriteByte('\n')
	}
	file := filepath.Join(dir, "events.jsonl")
	if err := os.WriteFile(file, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if code, _, stderr, _ := run(t, dir, "import", "--data", a, file); code != 0 {
		t.Fatalf("import: exit %d\n%s", code, stderr)
	}
	want := exportLines(t, a)
	if len(want) != len(f.Valid) {
		t.Fatalf("imported %d valid events, the fixture has %d", len(want), len(f.Valid))
	}

	srv, url, drained := startServed(t, "serve", "--data", a, "--listen", "127.0.0.1:0", "--max-limit", "50", "--cache", "64MiB")

	if code, _, stderr, _ := run(t, dir, "crawl", "--data", b, url); code != 0 {
		t.Fatalf("crawl of %s: exit %d\n%s", url, code, stderr)
	}
	if got := exportLines(t, b); !maps.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("crawled back %d events, the archive has %d (or they differ)", len(got), len(want))
	}
	if got := exportLines(t, a); len(got) != len(want) {
		t.Fatalf("export while serving: %d events, want %d", len(got), len(want))
	}
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, <-drained)
	}
	<-drained
}

// `archiver run --serve` serves the archive it is writing: once the
// relay is archived and verified, `archiver sync` (NIP-77) and `archiver
// crawl` (REQ) from its serve port each reproduce exactly the relay's
// valid events, while the daemon keeps running; SIGTERM then stops
// serve and the daemon cleanly.
func TestRunServes(t *testing.T) {
	t.Parallel()
	f := fixture(t, testrelay.FixtureOptions{Seed: 16, Events: 600, Wall: 120, BadSigs: 4, ForgedIDs: 2})
	r := relay(t, testrelay.Options{MaxLimit: 200}, f) // pages hold the wall: it completes
	dir := t.TempDir()
	d := startDaemon(t, "--data", filepath.Join(dir, "a"), "--relay", r.URL(), "--serve", "127.0.0.1:0")
	served := loggedField(d.stderr.String(), "serving the archive read-only", "url")
	if served == "" {
		t.Fatalf("no serve start logged:\n%s", tail(d.stderr.String()))
	}
	d.waitStatus("backfill verified", func(st *daemon.Status) bool { return relayDone(r.URL())(st) && allVerified(len(f.Valid))(st) })
	for _, cmd := range []string{"sync", "crawl"} {
		b := filepath.Join(dir, cmd)
		if code, _, stderr, _ := run(t, dir, cmd, "--data", b, served); code != 0 {
			t.Fatalf("%s from the daemon's serve port: exit %d\n%s", cmd, code, stderr)
		}
		assertExport(t, b, f)
	}
	d.stop(syscall.SIGTERM)
}

// `archiver crawl --serve` answers REQs while it crawls: verified events
// of the relay only, each once; the crawl itself completes as without.
func TestCrawlServes(t *testing.T) {
	t.Parallel()
	f := fixture(t, testrelay.FixtureOptions{Seed: 17, Events: 1000, BadSigs: 4, ForgedIDs: 2})
	r := relay(t, testrelay.Options{MaxLimit: 50, Latency: 50 * time.Millisecond}, f)
	dir := t.TempDir()
	data := filepath.Join(dir, "a")
	cmd, url, rest := startServed(t, "crawl", "--data", data, "--serve", "127.0.0.1:0", r.URL())
	valid := map[string]bool{}
	for _, v := range f.Valid {
		valid[hex.EncodeToString(v.ID[:])] = true
	}
	// REQ until something is served: the crawl serves its archive as
	// the verify pool judges it, before it exits.
	c := relayclient.Dial(t, url)
	for n := 0; n == 0; {
		p := c.ReqRaw("all", `{}`)
		if p.End.Label != "EOSE" {
			t.Fatalf("REQ during the crawl ended %s", p.End.Raw)
		}
		seen := map[string]bool{}
		for _, id := range p.IDs() {
			if seen[id] || !valid[id] {
				t.Fatalf("served during the crawl: %s twice, or not a valid event of the relay", id)
			}
			seen[id] = true
		}
		if n = len(seen); n > 0 {
			t.Logf("%d of %d events served during the crawl", n, len(valid))
		}
	}
	c.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("crawl --serve: %v\n%s", err, <-rest)
	}
	<-rest
	assertExport(t, data, f)
}
