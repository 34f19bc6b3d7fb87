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

// A crawl over a damaged archive, case by case (issue 12: a crawl on a
// damaged archive reported drained, exit 0). The same job again, which an
// earlier run finished, reads back what that run stored of the relay:
// bodies the relay serves again are repaired (drained, exit 0, and check
// passes after); bodies it no longer serves leave the relay `damaged`,
// exit 1, naming what to run. A new job pages every event again and
// repairs the damage the same way. Before: the same job read no body and
// said drained, exit 0; the new job said drained and exit 1 over damage it
// had repaired.
func TestCrawlOverDamage(t *testing.T) {
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
	copies := map[string]string{}
	for _, name := range []string{"same job", "new job", "relay gone"} {
		copies[name] = filepath.Join(t.TempDir(), "archive")
		if err := os.CopyFS(copies[name], os.DirFS(data)); err != nil {
			t.Fatal(err)
		}
	}
	if code, stdout, _ := runFor(t, time.Minute, "check", "--data", data); code != 1 || !strings.Contains(stdout, "damaged record event") {
		t.Fatalf("check of the garbled archive: exit %d, want 1 naming damaged events\n%s", code, stdout)
	}

	for _, c := range []struct {
		name     string
		extra    []string
		readBack bool // the damage is met reading back, not in pages
	}{{"same job", nil, true}, {"new job", []string{"--since", fmt.Sprint(f.Since)}, false}} {
		dir := copies[c.name]
		code, _, stderr := runFor(t, time.Minute, append(append([]string{"crawl", "--data", dir}, c.extra...), r.URL())...)
		l := line(stderr)
		t.Logf("%s over damage: exit %d: %s", c.name, code, l)
		if code != 0 || !strings.HasPrefix(l, r.URL()+": drained") || strings.Contains(l, "damaged") || !strings.Contains(stderr, "repaired ") {
			t.Errorf("%s over damage: exit %d, line %q; want drained, exit 0, and the repair named\n%s", c.name, code, l, tail(stderr))
		}
		if asked := strings.Contains(stderr, "asked the relay again for damaged events"); asked != c.readBack {
			t.Errorf("%s over damage: damaged ids asked for again by id: %v, want %v", c.name, asked, c.readBack)
		}
		if code, stdout, stderr := runFor(t, time.Minute, "check", "--data", dir); code != 0 {
			t.Errorf("check after the %s crawl: exit %d\n%s%s", c.name, code, stdout, stderr)
		}
	}

	// The relay no longer serves what it served: the same address, empty.
	addr := strings.TrimPrefix(r.URL(), "ws://")
	r.Close()
	empty, err := testrelay.New(testrelay.Options{Addr: addr})
	if err != nil {
		t.Fatalf("cannot listen on %s again: %v", addr, err)
	}
	defer empty.Close()
	dir := copies["relay gone"]
	code, _, stderr = runFor(t, time.Minute, "crawl", "--data", dir, "--log-format", "console", r.URL())
	l := line(stderr)
	t.Logf("relay gone, over damage: exit %d: %s", code, l)
	if code != 1 || !strings.HasPrefix(l, r.URL()+": damaged: ") || !strings.Contains(l, "did not serve them again") ||
		!strings.Contains(l, "archiver repair --data "+dir) {
		t.Errorf("crawl over damage the relay no longer serves: exit %d, line %q; want damaged, exit 1, and what to run", code, l)
	}
	forPeople(t, "crawl", stderr)
}
