package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/rawstore/storetest"
	"github.com/nostr-archiver/archiver/testrelay"
)

// runFor runs the archiver with a deadline: a hang is the failure.
func runFor(t *testing.T, d time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = childEnv()
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("archiver %v did not finish within %v\n%s", args, d, tail(errb.String()))
	}
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("archiver %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// A crawl into a real 12 MiB tmpfs (issue 12's case, smaller: the disk
// fills all the same, in less time) with more than 12 MiB to fetch: it stops with exit 1 and one plain line naming the
// directory and the space free; then stats, export and a second crawl on
// the full disk finish (no spinning) and say what they should. Before:
// the crawl died with a fatal JSON line and a stack, and every command
// after it spun for 10 minutes. Needs root to mount; skipped otherwise.
func TestFullDisk(t *testing.T) {
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s)", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	f := fixture(t, testrelay.FixtureOptions{Seed: 12, Events: 9000})
	r := relay(t, testrelay.Options{MaxLimit: 500}, f)
	data := filepath.Join(mnt, "archive")

	code, _, stderr := runFor(t, 3*time.Minute, "crawl", "--data", data, "--log-format", "console", r.URL())
	t.Logf("crawl on a full disk:\n%s", tail(stderr))
	if code != 1 || !strings.Contains(stderr, "no space left for the archive") || !strings.Contains(stderr, data) || !strings.Contains(stderr, "free") {
		t.Fatalf("crawl on a full disk: exit %d, want 1 and a message naming %s and the space free", code, data)
	}
	forPeople(t, "crawl", stderr)

	code, stdout, stderr := runFor(t, time.Minute, "stats", "--data", data)
	if code != 0 || !strings.Contains(stdout, "events") {
		t.Fatalf("stats on the full disk: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runFor(t, time.Minute, "export", "--data", data)
	if code != 0 {
		t.Fatalf("export on the full disk: exit %d\n%s", code, stderr)
	}
	t.Logf("exported %d lines; %s", strings.Count(stdout, "\n"), strings.TrimSpace(stderr))
	code, _, stderr = runFor(t, time.Minute, "crawl", "--data", data, r.URL())
	if code != 1 || !strings.Contains(stderr, "no space left for the archive") {
		t.Fatalf("second crawl on the full disk: exit %d\n%s", code, tail(stderr))
	}
}

// 4 KiB garbled in a blob file of a crawled archive: check and export
// exit 1 naming the damage, export writes only whole lines, repair
// fetches the damaged bodies by id from the relay the archive crawled,
// and then check passes and export is exact again. Before: stats said
// all valid, export panicked after a half-written line.
func TestDamagedArchiveRepair(t *testing.T) {
	t.Parallel()
	// 1200 events make blob files large enough that 4 KiB of garbage
	// hits event bodies (asserted below: check and export see damage).
	f := fixture(t, testrelay.FixtureOptions{Seed: 5, Events: 1200})
	r := relay(t, testrelay.Options{MaxLimit: 500}, f)
	data := filepath.Join(t.TempDir(), "archive")
	if code, _, stderr := runFor(t, 2*time.Minute, "crawl", "--data", data, r.URL()); code != 0 {
		t.Fatalf("crawl: exit %d\n%s", code, tail(stderr))
	}
	// A writable open replays the WAL into tables and blob files.
	if code, _, stderr := runFor(t, time.Minute, "reprocess", "--data", data); code != 0 {
		t.Fatalf("reprocess: exit %d\n%s", code, tail(stderr))
	}
	storetest.Garble(t, data, ".seg", 4096)

	code, stdout, stderr := runFor(t, time.Minute, "check", "--data", data)
	if code != 1 || !strings.Contains(stdout, "damaged record event") || !strings.Contains(stderr, "archiver repair") {
		t.Fatalf("check on a damaged archive: exit %d\n%s%s", code, stdout, stderr)
	}
	forPeople(t, "check", stderr)
	code, stdout, stderr = runFor(t, time.Minute, "export", "--data", data)
	lines := strings.Split(stdout, "\n")
	if code != 1 || !strings.Contains(stderr, "damaged") || lines[len(lines)-1] != "" {
		t.Fatalf("export on a damaged archive: exit %d, last line %q\n%s", code, lines[len(lines)-1], tail(stderr))
	}
	for _, l := range lines[:len(lines)-1] {
		if _, err := event.Parse([]byte(l)); err != nil {
			t.Fatalf("export wrote a line that does not parse: %v", err)
		}
	}
	t.Logf("export of the damaged archive: %d of %d lines; %s", len(lines)-1, len(f.Valid), oneLine(stderr))
	if len(lines)-1 >= len(f.Valid) {
		t.Errorf("export wrote %d lines of %d valid events over a damaged blob", len(lines)-1, len(f.Valid))
	}

	code, stdout, stderr = runFor(t, 2*time.Minute, "repair", "--data", data)
	if code != 0 {
		t.Fatalf("repair: exit %d\n%s%s", code, stdout, tail(stderr))
	}
	t.Logf("repair: %s", oneLine(stdout))
	if code, stdout, stderr := runFor(t, time.Minute, "check", "--data", data); code != 0 {
		t.Fatalf("check after repair: exit %d\n%s%s", code, stdout, stderr)
	}
	assertExport(t, data, f)
}

// The line `archiver crawl` prints per relay names the damage the store
// met during the run. Before: the relay's line read `drained`, and only a
// global message at the end said the archive was damaged.
func TestCrawlLineNamesDamage(t *testing.T) {
	t.Parallel()
	f := fixture(t, testrelay.FixtureOptions{Seed: 5, Events: 600})
	r := relay(t, testrelay.Options{}, f)
	data := filepath.Join(t.TempDir(), "archive")
	line := func(stderr string) string {
		for _, l := range strings.Split(stderr, "\n") {
			if strings.HasPrefix(l, r.URL()+": ") {
				return l
			}
		}
		t.Fatalf("no line for %s:\n%s", r.URL(), tail(stderr))
		return ""
	}
	code, _, stderr := runFor(t, time.Minute, "crawl", "--data", data, r.URL())
	if l := line(stderr); code != 0 || !strings.HasPrefix(l, r.URL()+": drained") || strings.Contains(l, "damaged") {
		t.Fatalf("crawl of a sound archive: exit %d, line %q", code, l)
	}
	// A writable open replays the WAL into tables and blob files.
	if code, _, stderr := runFor(t, time.Minute, "reprocess", "--data", data); code != 0 {
		t.Fatalf("reprocess: exit %d\n%s", code, tail(stderr))
	}
	storetest.Garble(t, data, ".seg", 4096)
	// A range of its own is a new job: every event is paged again, and
	// the ingest meets the damaged copies.
	code, _, stderr = runFor(t, time.Minute, "crawl", "--data", data, "--since", fmt.Sprint(f.Since), r.URL())
	l := line(stderr)
	t.Logf("crawl of a damaged archive: exit %d: %s", code, l)
	if code != 1 || !strings.HasPrefix(l, r.URL()+": drained") || !strings.Contains(l, "; not complete: the archive met ") ||
		!strings.Contains(l, "damaged records during the run") || !strings.Contains(l, "archiver repair --data "+data) {
		t.Errorf("crawl of a damaged archive: exit %d, line %q; want exit 1 and the damage named", code, l)
	}
}
