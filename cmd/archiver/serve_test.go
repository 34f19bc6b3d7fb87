package main

import (
	"bufio"
	"bytes"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nostr-archiver/archiver/testrelay"
)

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

	srv := archiver("serve", "--data", a, "--listen", "127.0.0.1:0", "--max-limit", "50")
	stderrPipe, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	rd := bufio.NewReader(stderrPipe)
	var url string
	for url == "" {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("serve ended before serving: %v", err)
		}
		if _, u, ok := strings.Cut(strings.TrimSpace(line), " on ws://"); ok {
			url = "ws://" + u
		}
	}
	drained := make(chan string, 1)
	go func() {
		rest, _ := io.ReadAll(rd)
		drained <- string(rest)
	}()

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
