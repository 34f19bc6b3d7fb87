package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/filter/filtertest"
	"github.com/nostr-archiver/archiver/testrelay"
)

// `export --filter` through the binary, on an imported archive, equals the
// brute-force NIP-01 answer over the fixture's valid events, in order and
// byte for byte, before and after `reprocess --all`; a malformed filter is
// exit 2 with its reason.
func TestExportFilter(t *testing.T) {
	t.Parallel()
	f := fixture(t, testrelay.FixtureOptions{Seed: 14, Events: 600, Authors: 8, Wall: 60, TagWall: 30, BadSigs: 4, ForgedIDs: 2})
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
	data := filepath.Join(dir, "a")
	if code, _, stderr, _ := run(t, dir, "import", "--data", data, file); code != 0 {
		t.Fatalf("import: exit %d\n%s", code, stderr)
	}

	var all []*filtertest.Event
	lines := map[string][]byte{}
	for _, v := range f.Valid {
		e, err := filtertest.Decode(v.Line)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, e)
		lines[e.ID] = v.Line
	}
	filtertest.Sort(all)
	var bad []string
	for _, b := range f.Bad {
		var id [32]byte
		if event.DecodeHex32(&id, []byte(b.ID)) == nil {
			if _, ok := f.Lookup(id); !ok {
				bad = append(bad, b.ID)
			}
		}
	}
	ts := func(v int64) *int64 { return &v }
	lim := func(v int) *int { return &v }
	cases := [][]filtertest.Filter{
		{{Kinds: []int{1}, Limit: lim(25)}},
		{{Authors: []string{f.Authors[0], f.Authors[3]}, Kinds: []int{0, 3, 30023}}},
		{{Tags: map[string][]string{"t": {"tagwall0", "nostr"}}, Since: ts(f.TagWallAt - 86400)}},
		{{Since: ts(f.WallAt), Until: ts(f.WallAt), Limit: lim(17)}},
		{{IDs: append([]string{all[5].ID, all[100].ID}, bad...)}},
		{{Kinds: []int{7}, Limit: lim(3)}, {Authors: []string{f.Authors[1]}, Limit: lim(4)}},
		{{Since: ts(f.Until - 86400)}},
	}
	check := func(when string) {
		for _, fs := range cases {
			js := filtertest.JSONArray(fs)
			if len(fs) == 1 {
				js = fs[0].JSON()
			}
			code, out, stderr, _ := run(t, dir, "export", "--data", data, "--filter", js)
			if code != 0 {
				t.Fatalf("%s: export --filter %s: exit %d\n%s", when, js, code, stderr)
			}
			forPeople(t, "export --filter", stderr)
			var want []byte
			for _, id := range filtertest.Brute(all, fs) {
				want = append(append(want, lines[id]...), '\n')
			}
			if len(want) == 0 {
				t.Fatalf("%s: %s matches nothing: the case proves little", when, js)
			}
			if out != string(want) {
				t.Errorf("%s: export --filter %s:\ngot %d lines, want %d:\n%.600s", when, js, strings.Count(out, "\n"), bytes.Count(want, []byte("\n")), out)
			}
		}
	}
	check("after import")
	// --latest: one version per replaceable author+kind and addressable
	// author+kind+d.
	latestFilter := filtertest.Filter{Kinds: []int{0, 3, 30023}}
	code, out, stderr, _ := run(t, dir, "export", "--data", data, "--latest", "--filter", latestFilter.JSON())
	var want []byte
	latest := filtertest.Brute(filtertest.Latest(all), []filtertest.Filter{latestFilter})
	for _, id := range latest {
		want = append(append(want, lines[id]...), '\n')
	}
	if every := filtertest.Brute(all, []filtertest.Filter{latestFilter}); len(latest) == 0 || len(latest) == len(every) {
		t.Fatalf("latest %d of %d versions: the case proves nothing", len(latest), len(every))
	}
	if code != 0 || out != string(want) {
		t.Fatalf("export --latest: exit %d, %d lines, want %d\n%s", code, strings.Count(out, "\n"), len(latest), stderr)
	}
	if code, _, stderr, _ := run(t, dir, "reprocess", "--data", data, "--index"); code != 0 || !strings.Contains(stderr, "indexed 0 valid events") {
		t.Fatalf("reprocess --index on an indexed archive: exit %d, want nothing to do\n%s", code, stderr)
	}
	if code, _, stderr, _ := run(t, dir, "reprocess", "--data", data, "--all"); code != 0 {
		t.Fatalf("reprocess --all: exit %d\n%s", code, stderr)
	}
	check("after reprocess --all")

	for _, c := range []struct{ filter, reason string }{
		{`{"kinds":[1]`, "unexpected end of JSON"},
		{`{"kind":[1]}`, `"kind": unknown field`},
		{`{"authors":["ABC"]}`, "not 64 lowercase hex"},
		{`{"kinds":[70000]}`, "outside 0..65535"},
		{`{"since":"yesterday"}`, "not an integer"},
		{`{"#ee":["x"]}`, "unknown field"},
		{`[]`, "empty array of filters"},
		{`"x"`, "not a JSON object"},
		{"", "--latest needs --filter"},
	} {
		args := []string{"export", "--data", data, "--filter", c.filter}
		if c.filter == "" {
			args = []string{"export", "--data", data, "--latest"}
		}
		code, out, stderr, _ := run(t, dir, args...)
		if code != 2 || out != "" || !strings.Contains(stderr, c.reason) {
			t.Errorf("export --filter %s: exit %d, %d bytes out, want exit 2 saying %q:\n%s", c.filter, code, len(out), c.reason, stderr)
		}
	}
	if !slices.IsSortedFunc(all, func(a, b *filtertest.Event) int { return int(b.CreatedAt - a.CreatedAt) }) {
		t.Fatal("brute-force order is not newest first")
	}
}
