package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nostr-archiver/archiver/rawstore"
)

// newArchive creates an empty archive in dir.
func newArchive(t *testing.T, dir string) {
	t.Helper()
	s, err := rawstore.Open(rawstore.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// listing is every file under dir, for "nothing was created" checks.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// Read-only commands refuse a directory that is not an archive, with a
// plain message and exit 1, and create nothing: not the mistyped
// directory, not a Pebble file in another program's directory.
// (Before: an empty archive was created and zeros printed, exit 0.)
func TestReadOnlyCommandsRefuseNonArchive(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"stats", "export", "reprocess", "check", "serve"} {
		for _, tc := range []struct {
			name  string
			setup func(dir string) string
		}{
			{"missing", func(dir string) string { return filepath.Join(dir, "mistyped") }},
			{"other program's", func(dir string) string {
				d := filepath.Join(dir, "photos")
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d, "cat.jpg"), []byte("meow"), 0o644); err != nil {
					t.Fatal(err)
				}
				return d
			}},
		} {
			t.Run(cmd+"/"+tc.name, func(t *testing.T) {
				dir := t.TempDir()
				data := tc.setup(dir)
				before := listing(t, dir)
				code, _, stderr, _ := run(t, dir, cmd, "--data", data)
				if code != 1 {
					t.Errorf("exit %d, want 1\n%s", code, stderr)
				}
				if !strings.Contains(stderr, "not an archive") {
					t.Errorf("stderr does not say 'not an archive':\n%s", stderr)
				}
				forPeople(t, cmd, stderr)
				if after := listing(t, dir); strings.Join(after, "\n") != strings.Join(before, "\n") {
					t.Errorf("files changed:\nbefore %q\nafter  %q", before, after)
				}
			})
		}
	}
}

// An archive held by a writer (here this test process) is refused with
// the holder's pid instead of a lock errno and a stack.
func TestArchiveInUseNamesPID(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "archive")
	s, err := rawstore.Open(rawstore.Options{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := fmt.Sprintf("archive in use by another archiver (pid %d)", os.Getpid())
	for _, cmd := range []string{"stats", "export", "reprocess", "check", "serve"} {
		code, _, stderr, _ := run(t, dir, cmd, "--data", data)
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("%s: exit %d, stderr\n%s\nwant exit 1 and %q", cmd, code, stderr, want)
		}
		forPeople(t, cmd, stderr)
	}
}

// Readers share an archive: stats runs while another reader holds it.
func TestReadersShareArchive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "archive")
	newArchive(t, data)
	r, err := rawstore.Open(rawstore.Options{Dir: data, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if code, _, stderr, _ := run(t, dir, "stats", "--data", data); code != 0 {
		t.Errorf("stats beside a reader: exit %d\n%s", code, stderr)
	}
}

// An archive on a read-only mount can be read by stats, export and
// check. Needs root for mount; skipped otherwise.
func TestReadOnlyMount(t *testing.T) {
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s)", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	data := filepath.Join(mnt, "archive")
	newArchive(t, data)
	if out, err := exec.Command("mount", "-o", "remount,ro", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount ro: %v: %s", err, out)
	}
	for _, cmd := range []string{"stats", "export", "check"} {
		if code, _, stderr, _ := run(t, dir, cmd, "--data", data); code != 0 {
			t.Errorf("%s on a read-only mount: exit %d\n%s", cmd, code, stderr)
		}
	}
}
