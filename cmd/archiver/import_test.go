package main

import (
	"bytes"
	"encoding/json"
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
	t.Parallel()
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

// show names every copy of a forged id: the valid one and the forgery
// with its reason, and the sources that served each.
func TestShowForgedID(t *testing.T) {
	t.Parallel()
	f := fixture(t, testrelay.FixtureOptions{Seed: 12, Events: 200, ForgedIDs: 2})
	dir := t.TempDir()
	var in bytes.Buffer
	for _, it := range f.Items {
		in.Write(it.Raw)
		in.WriteByte('\n')
	}
	file := filepath.Join(dir, "forged.jsonl")
	if err := os.WriteFile(file, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "a")
	if code, _, stderr, _ := run(t, dir, "import", "--data", data, file); code != 0 {
		t.Fatalf("import: exit %d\n%s", code, stderr)
	}
	var forged []testrelay.BadCopy
	for _, b := range f.Bad {
		if b.Reason == testrelay.ReasonIDMismatch {
			forged = append(forged, b)
		}
	}
	if len(forged) != 2 {
		t.Fatalf("fixture has %d forged copies", len(forged))
	}
	for _, b := range forged {
		code, stdout, stderr, _ := run(t, dir, "show", "--data", data, "--json", b.ID)
		if code != 0 {
			t.Fatalf("show %s: exit %d\n%s", b.ID, code, stderr)
		}
		var got struct {
			ID      string
			Sources []string
			Copies  []struct{ Source, Verdict, Reason, Raw string }
		}
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatalf("show --json: %v\n%s", err, stdout)
		}
		var valid, bad int
		for _, c := range got.Copies {
			switch {
			case c.Verdict == "valid" && c.Source == "import:forged.jsonl":
				valid++
			case c.Verdict == "invalid" && c.Reason == "id-mismatch" && c.Raw == string(b.Raw):
				bad++
			}
		}
		if got.ID != b.ID || valid != 1 || bad != 1 || len(got.Sources) == 0 {
			t.Errorf("show %s: %+v\nwant the valid copy and the forgery with its reason", b.ID, got)
		}
	}
	code, _, stderr, _ := run(t, dir, "show", "--data", data, strings.Repeat("0", 64))
	if code != 1 || !strings.Contains(stderr, "is not in the archive") {
		t.Errorf("show of an id not held: exit %d\n%s", code, stderr)
	}
	if code, _, _, _ := run(t, dir, "show", "--data", data, "xyz"); code != 2 {
		t.Errorf("show of a malformed id: exit %d, want 2", code)
	}
}
