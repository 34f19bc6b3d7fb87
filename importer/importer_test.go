package importer_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/importer"
	"github.com/nostr-archiver/archiver/lazyparse"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/testrelay"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var fixture *testrelay.Fixture

// corpus is a small fixture with every kind of bad copy the verifier
// knows, as JSON Lines; it is signed once per test binary.
func corpus(t *testing.T) *testrelay.Fixture {
	t.Helper()
	if fixture == nil {
		f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 7, Events: 1500, ForgedIDs: 6, RandomIDs: 5,
			BadSigs: 5, BadPubKeys: 3, Malformed: 4, Duplicates: 10, Lookalikes: 10, Varied: 20, Workers: 2,
			CacheDir: fixtureCache()})
		if err != nil {
			t.Fatal(err)
		}
		fixture = f
	}
	return fixture
}

// jsonl writes the fixture's event objects, one per line. Some are
// served with newlines between their tokens; a JSONL writer puts those on
// one line (a JSON string cannot hold a raw newline, so only whitespace
// changes and every id stays right).
func jsonl(f *testrelay.Fixture) []byte {
	var b bytes.Buffer
	for _, it := range f.Items {
		if !it.Frame {
			b.Write(bytes.ReplaceAll(it.Raw, []byte("\n"), []byte(" ")))
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

func openStore(t *testing.T, dir string) *rawstore.Store {
	t.Helper()
	s, err := rawstore.Open(rawstore.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func run(t *testing.T, s *rawstore.Store, name string, r io.Reader, o importer.Options) importer.Result {
	t.Helper()
	o.Store, o.Name = s, name
	im, err := importer.New(o)
	if err != nil {
		t.Fatal(err)
	}
	res, err := im.Run(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// exported verifies what is pending and returns the valid set as export
// writes it.
func exported(t *testing.T, s *rawstore.Store) []string {
	t.Helper()
	pool, err := lazyparse.New(lazyparse.Options{Store: s, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	var out []string
	err = s.ForEachValid(func(id [32]byte, raw []byte) error {
		e, err := event.Parse(raw)
		if err != nil {
			return err
		}
		out = append(out, string(event.AppendJSON(nil, e)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wantValid(f *testrelay.Fixture) []string {
	var out []string
	for _, v := range f.Valid {
		out = append(out, string(v.Line))
	}
	return out
}

func equalSets(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("valid events: got %d, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("valid event %d differs:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

// TestImportFixture imports every valid and invalid copy the fixture
// makes, with bad lines between them, and checks the exact valid set, the
// verdicts, and where each bad line was quarantined.
func TestImportFixture(t *testing.T) {
	f := corpus(t)
	lines := strings.Split(strings.TrimSuffix(string(jsonl(f)), "\n"), "\n")
	// Bad lines at known places (1-based line numbers of the file).
	bad := map[int]string{
		3:  "not json at all",
		10: `{"kind":1,"content":"no id"}`,
		11: `["EVENT","x",{}]`,
		20: "",                                                       // too long: set below
		30: `{"id":"` + strings.Repeat("b", 64) + `","created_at":1`, // cut
	}
	maxLine := 0
	for _, l := range f.Items {
		maxLine = max(maxLine, len(l.Raw))
	}
	bad[20] = `{"id":"` + strings.Repeat("a", 64) + `","created_at":1,"kind":1,"content":"` + strings.Repeat("x", maxLine) + `"}`
	var file []string
	for n := 1; len(lines) > 0; n++ {
		if l, ok := bad[n]; ok {
			file = append(file, l)
			continue
		}
		if n == 40 {
			file = append(file, "", "   ") // blank lines: skipped, not quarantined
			n += 2
		}
		file = append(file, lines[0])
		lines = lines[1:]
	}
	in := strings.Join(file, "\r\n") + "\r\n" // CRLF line ends
	s := openStore(t, t.TempDir())
	defer s.Close()
	var reported []int64
	res := run(t, s, "fixture.jsonl", strings.NewReader(in), importer.Options{
		MaxLine: maxLine, BatchEvents: 97,
		OnMalformed: func(line int64, reason string) { reported = append(reported, line) },
	})
	// The fixture's objects that are not events (no valid id) are
	// quarantined here too, as the crawl quarantines their frames.
	if res.Malformed != int64(len(reported)) || len(reported) < len(bad) {
		t.Fatalf("quarantined %d lines (reported %v), want at least %d", res.Malformed, reported, len(bad))
	}
	if events := int64(len(file)-2) - res.Malformed; res.Events != events || res.Lines != int64(len(file)) {
		t.Fatalf("events %d lines %d, want %d and %d", res.Events, res.Lines, events, len(file))
	}
	equalSets(t, exported(t, s), wantValid(f))
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	where := map[string]string{}
	err = s.ForEachQuarantined(func(q rawstore.Quarantined) error {
		if q.Where != "" {
			where[q.Where] = string(q.Raw)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for n, l := range bad {
		got, ok := where["line "+strconv.Itoa(n)]
		if !ok || !strings.HasPrefix(l, got) || got == "" {
			t.Errorf("line %d: quarantined as %q, want a prefix of %q (all: %v)", n, got, l, where)
		}
	}
	var total int64
	for _, n := range st.InvalidCopies {
		total += n
	}
	if want := int64(len(f.Bad) + len(bad)); total != want {
		t.Errorf("invalid copies %d (%v), want %d", total, st.InvalidCopies, want)
	}
}

// TestImportResumes cuts the input mid-line, as a killed download or a
// file still being written leaves it, then imports the whole file under
// the same name: every event arrives once, the cut line is not lost, and
// a third run reads nothing. A pipe (no Seek) resumes the same way.
func TestImportResumes(t *testing.T) {
	f := corpus(t)
	full := jsonl(f)
	cut := len(full) / 3
	for _, tc := range []struct {
		name string
		wrap func([]byte) io.Reader
	}{
		{"file", func(b []byte) io.Reader { return bytes.NewReader(b) }},
		{"pipe", func(b []byte) io.Reader { return struct{ io.Reader }{bytes.NewReader(b)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, t.TempDir())
			defer s.Close()
			first := run(t, s, "x", tc.wrap(full[:cut]), importer.Options{BatchEvents: 50})
			second := run(t, s, "x", tc.wrap(full), importer.Options{BatchEvents: 50})
			if second.ResumedAt == 0 || second.Restarted {
				t.Fatalf("second run did not resume: %+v", second)
			}
			if want := int64(bytes.Count(full[:cut], []byte("\n"))); second.ResumedAt != want {
				t.Fatalf("resumed after line %d, want %d (the last whole line)", second.ResumedAt, want)
			}
			third := run(t, s, "x", tc.wrap(full), importer.Options{})
			if third.Lines != 0 || third.Events != 0 {
				t.Fatalf("third run read %d lines", third.Lines)
			}
			// The cut line was read twice (cut, then whole): at most one
			// event is new twice over.
			lines := int64(bytes.Count(full, []byte("\n")))
			if first.Lines+second.Lines != lines+1 {
				t.Fatalf("lines read %d+%d, want %d", first.Lines, second.Lines, lines+1)
			}
			equalSets(t, exported(t, s), wantValid(f))
		})
	}
}

// TestImportOtherFileSameName: a different file under a name already
// imported is read from its start, not from the old file's offset.
func TestImportOtherFileSameName(t *testing.T) {
	f := corpus(t)
	full := jsonl(f)
	half := bytes.Index(full[len(full)/2:], []byte("\n")) + len(full)/2 + 1
	s := openStore(t, t.TempDir())
	defer s.Close()
	run(t, s, "x", bytes.NewReader(full[half:]), importer.Options{})
	res := run(t, s, "x", bytes.NewReader(full[:half]), importer.Options{})
	if !res.Restarted || res.ResumedAt != 0 {
		t.Fatalf("want a restart from the start: %+v", res)
	}
	equalSets(t, exported(t, s), wantValid(f))
}

// TestImportCancelled: a cancelled import keeps what it committed, and the
// same command resumes to the exact set.
func TestImportCancelled(t *testing.T) {
	f := corpus(t)
	full := jsonl(f)
	dir := filepath.Join(t.TempDir(), "a")
	s := openStore(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	commits := 0
	im, err := importer.New(importer.Options{Store: s, Name: "x", BatchEvents: 100, OnCommit: func() {
		if commits++; commits == 3 {
			cancel()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := im.Run(ctx, bytes.NewReader(full))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if res.Events != 300 || res.New == 0 {
		t.Fatalf("read %d events (%d new) before the cancel, want 300", res.Events, res.New)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	defer s.Close()
	again := run(t, s, "x", bytes.NewReader(full), importer.Options{})
	if again.ResumedAt != 300 {
		t.Fatalf("resumed after line %d, want 300", again.ResumedAt)
	}
	equalSets(t, exported(t, s), wantValid(f))
}

// TestImportIsIdempotentUnderAnotherName: the same events imported under
// two names are held once, with both sources recorded.
func TestImportSources(t *testing.T) {
	f := corpus(t)
	full := jsonl(f)
	s := openStore(t, t.TempDir())
	defer s.Close()
	a := run(t, s, "a", bytes.NewReader(full), importer.Options{})
	b := run(t, s, "b", bytes.NewReader(full), importer.Options{})
	if b.New != 0 || b.Duplicates == 0 || a.New == 0 {
		t.Fatalf("first %+v, second %+v: want the second to add nothing new", a, b)
	}
	id := f.Valid[0].ID
	src, err := s.Sources(id)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range src {
		names = append(names, s.RelayURL(r))
	}
	if strings.Join(names, ",") != "import:a,import:b" {
		t.Fatalf("sources of %x: %v", id[:4], names)
	}
}

func FuzzImportLines(f *testing.F) {
	f.Add([]byte("{\"id\":\""+strings.Repeat("a", 64)+"\",\"created_at\":5}\nnot json\n\n{\"kind\":1}"), 64)
	f.Add([]byte("\r\n\r\n{}"), 1)
	f.Fuzz(func(t *testing.T, in []byte, maxLine int) {
		if maxLine < 1 || maxLine > 1<<16 {
			return
		}
		s := openStore(t, t.TempDir())
		defer s.Close()
		var quarantined int64
		res := run(t, s, "f", bytes.NewReader(in), importer.Options{MaxLine: maxLine, BatchEvents: 3,
			OnMalformed: func(int64, string) { quarantined++ }})
		nonBlank := int64(0)
		for _, l := range bytes.Split(in, []byte("\n")) {
			if len(bytes.TrimSpace(l)) > 0 {
				nonBlank++
			}
		}
		if res.Events+quarantined != nonBlank {
			t.Fatalf("events %d + quarantined %d != %d non-blank lines", res.Events, quarantined, nonBlank)
		}
		if res.Offset != int64(len(in)) {
			t.Fatalf("offset %d, want %d", res.Offset, len(in))
		}
	})
}

// fixtureCache is where signed fixtures are kept across tests and runs
// (signing dominates generating one, under -race most of all); "" (sign
// anew) without a cache directory.
func fixtureCache() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "archiver-test-fixtures")
}
