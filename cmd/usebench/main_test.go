package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/filter"
	"github.com/nostr-archiver/archiver/testrelay"
)

// Every query usebench sends is a filter the archive accepts (a tag value
// once went out with Go's escapes, which JSON does not read), and each
// kind of query gets the REQs asked for.
func TestQueriesAreFilters(t *testing.T) {
	f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 3, Events: 300, Authors: 5, CacheDir: fixtureCache()})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, v := range f.Valid {
		b.Write(v.Line)
		b.WriteByte('\n')
	}
	b.WriteString("not an event\n")
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := readSamples(path, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s.events != int64(len(f.Valid)) || s.since > s.until {
		t.Fatalf("read %d events over [%d, %d], want %d", s.events, s.since, s.until, len(f.Valid))
	}
	qs := s.queries(40, 7)
	if len(qs) != 8 {
		t.Fatalf("%d kinds of query", len(qs))
	}
	for _, q := range qs {
		if len(q.filters) != 40 {
			t.Errorf("%s: %d REQs, want 40", q.name, len(q.filters))
		}
		for _, fl := range q.filters {
			if _, err := filter.Parse([]byte(fl)); err != nil {
				t.Errorf("%s: %s: %v", q.name, fl, err)
			}
		}
	}
}

func TestPercentiles(t *testing.T) {
	r := reqResult{}
	for i := 100; i >= 1; i-- {
		r.durations = append(r.durations, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 51 * time.Millisecond}, {0.99, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := r.pct(tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p*100, got, tc.want)
		}
	}
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
