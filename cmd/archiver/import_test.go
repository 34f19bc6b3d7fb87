package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nostr-archiver/archiver/testrelay"
)

// An export of one archive, with bad lines added, imported into another
// by the binary: the second archive exports exactly the first's valid
// set; each bad line is named with its line number; a second run adds
// nothing; bad usage is exit 2 and creates no archive.
func TestImportExportRoundTrip(t *testing.T) {
	f := fixture(t, testrelay.FixtureOptions{Seed: 11, Events: 800, BadSigs: 4, Varied: 10})
	dir := t.TempDir()
	var in bytes.Buffer
	for i, it := range f.Items {
		if i == 5 {
			in.WriteString("garbage line\n")
		}
		in.Write(bytes.ReplaceAll(it.Raw, []byte("\n"), []byte(" ")))
		in.WriteByte('\n')
	}
	file := filepath.Join(dir, "events.jsonl")
	if err := os.WriteFile(file, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "b")
	code, _, stderr, _ := run(t, dir, "import", "--data", data, file)
	if code != 0 {
		t.Fatalf("import: exit %d\n%s", code, stderr)
	}
	forPeople(t, "import", stderr)
	if !strings.Contains(stderr, "events.jsonl line 6 quarantined: import: not JSON") {
		t.Errorf("the bad line is not named:\n%s", stderr)
	}
	assertExport(t, data, f)
	code, _, stderr, _ = run(t, dir, "import", "--data", data, file)
	if code != 0 || !strings.Contains(stderr, "0 events (0 new") || !strings.Contains(stderr, "resumed after line") {
		t.Fatalf("second import: exit %d, want nothing read\n%s", code, stderr)
	}
	for _, args := range [][]string{
		{"import", "--data", "nope"},
		{"import", "--data", "nope", "-"},
		{"import", "--data", "nope", filepath.Join(dir, "missing.jsonl")},
		{"import", "--data", "nope", file, file},
	} {
		code, _, stderr, _ := run(t, dir, args...)
		if code != 2 {
			t.Errorf("archiver %v: exit %d, want 2\n%s", args, code, stderr)
		}
		forPeople(t, strings.Join(args, " "), stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "nope")); err == nil {
		t.Errorf("a usage error created the archive directory")
	}
}
