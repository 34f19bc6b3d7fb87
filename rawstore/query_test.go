package rawstore_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/filter"
	"github.com/nostr-archiver/archiver/filter/filtertest"
	"github.com/nostr-archiver/archiver/lazyparse"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/testrelay"
)

// extraEvents are what the generated corpus lacks: several versions of
// replaceable (0, 10002) and addressable (30000) events of one author, a
// deletion request (kind 5), a tag value too long to index, an uppercase
// tag letter, and a second of several events.
func extraEvents(t *testing.T) [][]byte {
	sk, _ := btcec.PrivKeyFromBytes(bytes.Repeat([]byte{7}, 32))
	long := strings.Repeat("L", rawstore.MaxIndexedTagValue+1)
	var out [][]byte
	add := func(kind int, at int64, tags ...[]string) {
		e := &event.Event{Kind: kind, CreatedAt: at, Tags: tags, Content: fmt.Sprintf("extra %d", len(out))}
		if e.Tags == nil {
			e.Tags = [][]string{}
		}
		if err := e.Sign(sk); err != nil {
			t.Fatal(err)
		}
		out = append(out, event.AppendJSON(nil, e))
	}
	for i := range 4 {
		add(0, 1_699_000_000+int64(i))
		add(10002, 1_699_000_100+int64(i), []string{"r", "wss://r.example"})
		add(30000, 1_699_000_200+int64(i), []string{"d", "list"}, []string{"p", "same"})
		add(30000, 1_699_000_200+int64(i), []string{"d", fmt.Sprint("other", i%2)})
		add(30001, 1_699_000_210+int64(i)) // no d tag: d is ""
		add(3, 1_699_000_220)              // versions of one second: the lowest id is the latest
		add(30002, 1_699_000_230+int64(i), []string{"d", long})
	}
	// Newer events of the same author and kind under another d: not newer
	// versions of the above.
	add(30001, 1_699_000_300, []string{"d", "y"})
	add(30002, 1_699_000_300, []string{"d", "x"})
	add(5, 1_699_000_300, []string{"e", "deleted"}, []string{"k", "1"})
	add(1, 1_699_000_400, []string{"t", long}, []string{"t", "short"})
	add(1, 1_699_000_401, []string{"T", "Upper"}, []string{"t", "short"})
	for range 5 {
		add(1, 1_699_000_500, []string{"t", "tie"})
	}
	return out
}

type corpus struct {
	store   *rawstore.Store
	fix     *testrelay.Fixture
	all     []*filtertest.Event // every valid event, newest first then by id
	latest  []*filtertest.Event // all but superseded replaceable and addressable versions
	authors []string
	kinds   []int
	tags    map[string][]string // letter -> values present
	times   []int64
	invalid []string // ids with no valid copy
}

func newCorpus(t *testing.T) *corpus {
	t.Helper()
	fix, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 14, Events: 500, Authors: 12, Wall: 120, TagWall: 60,
		ForgedIDs: 6, BadSigs: 6, BadPubKeys: 3, RandomIDs: 3, Malformed: 3, Duplicates: 5, Varied: 10, CacheDir: fixtureCache()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := rawstore.Open(rawstore.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	relay, err := s.RelayIndex("wss://corpus.example")
	if err != nil {
		t.Fatal(err)
	}
	b := &rawstore.Batch{Relay: relay}
	addRaw := func(idHex string, raw []byte) {
		var id [32]byte
		if event.DecodeHex32(&id, []byte(idHex)) != nil {
			return // no id to key it by: the receive path quarantines such frames
		}
		b.Events = append(b.Events, rawstore.Copy{ID: id, Raw: bytes.Clone(raw)})
	}
	for _, it := range fix.Items {
		if !it.Frame {
			addRaw(it.ID, it.Raw)
		}
	}
	for _, raw := range extraEvents(t) {
		var e filtertest.Event
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		addRaw(e.ID, raw)
	}
	if _, err := s.Ingest(b); err != nil {
		t.Fatal(err)
	}
	c := &corpus{store: s, fix: fix}
	c.drain(t)
	c.all = c.bruteAll(t)
	c.latest = filtertest.Latest(c.all)
	if len(c.all)-len(c.latest) < 20 {
		t.Fatalf("only %d superseded versions", len(c.all)-len(c.latest))
	}
	if len(c.all) < len(fix.Valid) {
		t.Fatalf("%d valid events, the fixture has %d", len(c.all), len(fix.Valid))
	}
	tags := map[string]map[string]bool{}
	seen := map[string]bool{}
	for _, e := range c.all {
		if !seen[e.PubKey] {
			c.authors = append(c.authors, e.PubKey)
		}
		seen[e.PubKey] = true
		if !slices.Contains(c.kinds, e.Kind) {
			c.kinds = append(c.kinds, e.Kind)
		}
		c.times = append(c.times, e.CreatedAt)
		for _, tg := range e.Tags {
			if len(tg) >= 2 && len(tg[0]) == 1 {
				if tags[tg[0]] == nil {
					tags[tg[0]] = map[string]bool{}
				}
				tags[tg[0]][tg[1]] = true
			}
		}
	}
	c.tags = map[string][]string{}
	for l, vs := range tags {
		for v := range vs {
			c.tags[l] = append(c.tags[l], v)
		}
		slices.Sort(c.tags[l])
	}
	valid := map[string]bool{}
	for _, e := range c.all {
		valid[e.ID] = true
	}
	for _, bad := range fix.Bad {
		var id [32]byte
		if event.DecodeHex32(&id, []byte(bad.ID)) == nil && !valid[bad.ID] && !slices.Contains(c.invalid, bad.ID) {
			c.invalid = append(c.invalid, bad.ID)
		}
	}
	if len(c.invalid) == 0 {
		t.Fatal("the corpus has no invalid ids")
	}
	return c
}

func (c *corpus) drain(t *testing.T) { verifyAll(t, c.store) }

// verifyAll verifies every stored copy with the real verify pool.
func verifyAll(t *testing.T, s *rawstore.Store) {
	t.Helper()
	pool, err := lazyparse.New(lazyparse.Options{Store: s, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats(); st.Pending != 0 {
		t.Fatalf("%d pending after drain", st.Pending)
	}
}

// bruteAll reads every valid event by the full scan export uses.
func (c *corpus) bruteAll(t *testing.T) []*filtertest.Event {
	t.Helper()
	var all []*filtertest.Event
	err := c.store.ForEachValid(func(id [32]byte, raw []byte) error {
		e, err := filtertest.Decode(raw)
		if err != nil {
			return err
		}
		all = append(all, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	filtertest.Sort(all)
	return all
}

// randomFilter draws a filter mostly from values present in the corpus.
func (c *corpus) randomFilter(r *rand.Rand) filtertest.Filter {
	var f filtertest.Filter
	pick := func(n int, from func() string) []string {
		out := make([]string, 0, n)
		for range n {
			out = append(out, from())
		}
		return out
	}
	event := func() *filtertest.Event { return c.all[r.IntN(len(c.all))] }
	absent := func() string { return hex.EncodeToString(binary32(r)) }
	if r.IntN(6) == 0 {
		f.IDs = pick(r.IntN(5), func() string {
			switch r.IntN(6) {
			case 0:
				return absent()
			case 1:
				return c.invalid[r.IntN(len(c.invalid))]
			}
			return event().ID
		})
	}
	if r.IntN(3) == 0 {
		f.Authors = pick(r.IntN(4), func() string {
			if r.IntN(8) == 0 {
				return absent()
			}
			return c.authors[r.IntN(len(c.authors))]
		})
	}
	if r.IntN(3) == 0 {
		for range 1 + r.IntN(3) {
			f.Kinds = append(f.Kinds, c.kinds[r.IntN(len(c.kinds))])
		}
		if r.IntN(10) == 0 {
			f.Kinds = append(f.Kinds, 4242) // absent
		}
	}
	if r.IntN(3) == 0 {
		f.Tags = map[string][]string{}
		letters := make([]string, 0, len(c.tags))
		for l := range c.tags {
			letters = append(letters, l)
		}
		slices.Sort(letters)
		for range 1 + r.IntN(2) {
			l := letters[r.IntN(len(letters))]
			vals := c.tags[l]
			f.Tags[l] = pick(1+r.IntN(3), func() string { return vals[r.IntN(len(vals))] })
		}
	}
	if r.IntN(2) == 0 {
		v := c.times[r.IntN(len(c.times))] - int64(r.IntN(3))
		f.Since = &v
	}
	if r.IntN(2) == 0 {
		v := c.times[r.IntN(len(c.times))] + int64(r.IntN(3))
		f.Until = &v
	}
	if r.IntN(2) == 0 {
		v := r.IntN(40)
		f.Limit = &v
	}
	return f
}

func binary32(r *rand.Rand) []byte {
	b := make([]byte, 32)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// query runs filters (a JSON array) through Parse and Query, returning
// the ids in the order Query gave them.
func query(t *testing.T, s *rawstore.Store, fs []filtertest.Filter) ([]string, error) {
	return queryWith(t, s.Query, fs)
}

func queryWith(t *testing.T, q func([]filter.Filter, func(*event.Event, []byte) error) error, fs []filtertest.Filter) ([]string, error) {
	t.Helper()
	js := filtertest.JSONArray(fs)
	pf, err := filter.Parse([]byte(js))
	if err != nil {
		t.Fatalf("parse %s: %v", js, err)
	}
	var out []string
	err = q(pf, func(e *event.Event, raw []byte) error {
		out = append(out, hex.EncodeToString(e.ID[:]))
		return nil
	})
	return out, err
}

// queryIDs is query through QueryIDs, which must give the same ids in
// the same order (from index keys alone where the index is exact), each
// with its event's created_at.
func (c *corpus) queryIDs(t *testing.T, fs []filtertest.Filter) ([]string, error) {
	t.Helper()
	at := make(map[string]int64, len(c.all))
	for _, e := range c.all {
		at[e.ID] = e.CreatedAt
	}
	pf, err := filter.Parse([]byte(filtertest.JSONArray(fs)))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	err = c.store.QueryIDs(pf, func(ts int64, id [32]byte) error {
		h := hex.EncodeToString(id[:])
		if at[h] != ts {
			return fmt.Errorf("%s: created_at %d, the event says %d", h, ts, at[h])
		}
		out = append(out, h)
		return nil
	})
	return out, err
}

// checkFilters compares Query with the brute-force scan on n random
// filter sets (one to three filters each).
func (c *corpus) checkFilters(t *testing.T, seed uint64, n int) (nonEmpty, latestDiffers int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range n {
		fs := []filtertest.Filter{c.randomFilter(r)}
		if r.IntN(4) == 0 {
			fs = append(fs, c.randomFilter(r), c.randomFilter(r))
		}
		got, err := query(t, c.store, fs)
		if err != nil {
			t.Fatal(err)
		}
		want := filtertest.Brute(c.all, fs)
		if !slices.Equal(got, want) {
			t.Fatalf("filter set %d %s:\nindex: %d %v\nbrute: %d %v", i, filtertest.JSONArray(fs), len(got), got, len(want), want)
		}
		if got, err = c.queryIDs(t, fs); err != nil || !slices.Equal(got, want) {
			t.Fatalf("ids only, filter set %d %s (%v):\nindex: %d %v\nbrute: %d %v", i, filtertest.JSONArray(fs), err, len(got), got, len(want), want)
		}
		if got, err = queryWith(t, c.store.QueryLatest, fs); err != nil {
			t.Fatal(err)
		}
		latest := filtertest.Brute(c.latest, fs)
		if !slices.Equal(got, latest) {
			t.Fatalf("latest only, filter set %d %s:\nindex: %d %v\nbrute: %d %v", i, filtertest.JSONArray(fs), len(got), got, len(latest), latest)
		}
		if !slices.Equal(latest, want) {
			latestDiffers++
		}
		if len(want) > 0 {
			nonEmpty++
		}
	}
	return nonEmpty, latestDiffers
}

// TestQueryIndexes runs on one corpus (signing and verifying it is most
// of the cost): the subtests run in order, the last one resetting it.
func TestQueryIndexes(t *testing.T) {
	c := newCorpus(t)
	t.Run("BruteForce", c.testBruteForce)
	t.Run("NeverInvalid", c.testNeverInvalid)
	t.Run("SmallPages", func(t *testing.T) {
		// Pages of 7 entries (shared by the filters of a set) and 1 KB of
		// bodies: page edges everywhere, and bodies past the byte share
		// read one by one.
		defer rawstore.SetPageLimits(7, 1000)()
		c.checkFilters(t, 4, filterSets(100))
	})
	t.Run("ResetAndBuild", c.testResetAndBuild)
	t.Run("Deferred", c.testDeferred)
}

// testDeferred builds the indexes sorted (DeferIndexes, as a crawl does),
// with runs of a few keys merged four at a time, and checks every filter
// against brute force; a sort cut off leaves the indexes unready until
// BuildIndexes.
func (c *corpus) testDeferred(t *testing.T) {
	defer rawstore.SetIndexSort(300, 4)()
	s := c.store
	ready := func(want bool, when string) {
		t.Helper()
		if got, err := s.IndexesReady(); err != nil || got != want {
			t.Fatalf("%s: indexes ready %v (%v), want %v", when, got, err, want)
		}
	}
	runs := func(when string) int {
		t.Helper()
		n, err := s.IndexRunFiles()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	reverify := func() {
		t.Helper()
		if _, err := s.ResetVerdicts(); err != nil {
			t.Fatal(err)
		}
		if err := s.DeferIndexes(); err != nil {
			t.Fatal(err)
		}
		c.drain(t)
		ready(false, "verified, not yet built")
		if _, err := query(t, s, []filtertest.Filter{{}}); !errors.Is(err, rawstore.ErrNotIndexed) {
			t.Fatalf("query while deferred: %v, want ErrNotIndexed", err)
		}
		if runs("verified") == 0 {
			t.Fatalf("no index run on disk after verifying %d events in runs of 300 bytes", len(c.all))
		}
	}

	reverify()
	if err := s.FinishIndexes(); err != nil {
		t.Fatal(err)
	}
	ready(true, "finished")
	if n := runs("finished"); n != 0 {
		t.Fatalf("%d index runs left after the build", n)
	}
	c.checkFilters(t, 5, 60)

	// A reset meanwhile forgets what was sorted, and the marks still come
	// back at the end.
	reverify()
	if _, err := s.ResetVerdicts(); err != nil {
		t.Fatal(err)
	}
	c.drain(t)
	ready(false, "reset and verified while deferred")
	if err := s.FinishIndexes(); err != nil {
		t.Fatal(err)
	}
	ready(true, "finished after a reset")
	c.checkFilters(t, 6, 60)

	// Cut off: the marks stay down, and the next sort restores none over
	// the lost keys; BuildIndexes covers every verdict.
	reverify()
	s.AbandonIndexSort()
	ready(false, "a sort cut off")
	if err := s.DeferIndexes(); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishIndexes(); err != nil {
		t.Fatal(err)
	}
	ready(false, "a sort after one cut off")
	if _, err := s.BuildIndexes(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	ready(true, "built")
	c.checkFilters(t, 7, 60)
	// The build covered the sort cut off: the next one restores the marks.
	if err := s.DeferIndexes(); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishIndexes(); err != nil {
		t.Fatal(err)
	}
	ready(true, "a sort after the build")
}

// filterSets returns n, or half of it under the race detector: each set
// is asked three ways and brute-forced, one goroutine through Pebble and
// the query code that -race slows tenfold. Without -race all n run.
func filterSets(n int) int {
	if rawstore.RaceEnabled {
		return n / 2
	}
	return n
}

func (c *corpus) testBruteForce(t *testing.T) {
	n := filterSets(200)
	if ne, ld := c.checkFilters(t, 1, n); ne < n*7/20 || ld < n/20 {
		t.Fatalf("of %d random filter sets, only %d matched anything and %d differ when latest-only: the test proves little", n, ne, ld)
	}

	// Targeted cases the random draw may miss.
	s := func(v int64) *int64 { return &v }
	lim := func(v int) *int { return &v }
	for _, fs := range [][]filtertest.Filter{
		{{}}, // everything
		{{Limit: lim(7)}},
		{{Kinds: []int{0}}, {Kinds: []int{30000}, Tags: map[string][]string{"d": {"list"}}}}, // every version of replaceables
		{{Kinds: []int{5}}},
		{{Tags: map[string][]string{"t": {strings.Repeat("L", rawstore.MaxIndexedTagValue+1)}}}}, // not indexed: answered from another index
		{{Tags: map[string][]string{"T": {"Upper"}}}},
		{{Tags: map[string][]string{"t": {"tie"}}, Limit: lim(3)}}, // ties: lowest ids first
		{{Since: s(c.fix.WallAt), Until: s(c.fix.WallAt), Limit: lim(50)}},
		{{Since: s(c.fix.TagWallAt), Until: s(c.fix.TagWallAt), Tags: map[string][]string{"t": {"tagwall0", "tagwall1"}}}},
		{{Authors: []string{}}}, // empty list: nothing
		{{Since: s(10), Until: s(5)}},
		{{IDs: c.invalid}},
	} {
		got, err := query(t, c.store, fs)
		if err != nil {
			t.Fatal(err)
		}
		want := filtertest.Brute(c.all, fs)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: index %v, brute %v", fs[0].JSON(), got, want)
		}
		if got, err = c.queryIDs(t, fs); err != nil || !slices.Equal(got, want) {
			t.Fatalf("ids only, %s: index %v (%v), brute %v", fs[0].JSON(), got, err, want)
		}
		if got, err = queryWith(t, c.store.QueryLatest, fs); err != nil {
			t.Fatal(err)
		}
		if want := filtertest.Brute(c.latest, fs); !slices.Equal(got, want) {
			t.Fatalf("latest only, %s: index %v, brute %v", fs[0].JSON(), got, want)
		}
	}
	all, _ := query(t, c.store, []filtertest.Filter{{}})
	if len(all) != len(c.all) {
		t.Fatalf("the empty filter returned %d of %d valid events", len(all), len(c.all))
	}
	if n := len(filtertest.Brute(c.all, []filtertest.Filter{{Kinds: []int{0}, Authors: []string{c.all[0].PubKey}}})); n == 0 {
		t.Log("no kind 0 by the newest author") // informative only
	}
}

func (c *corpus) testNeverInvalid(t *testing.T) {
	got, err := query(t, c.store, []filtertest.Filter{{IDs: c.invalid}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("invalid ids returned: %v", got)
	}
	// A forged copy shares a valid event's id: Query returns the valid
	// bytes, never the forgery's.
	for _, bad := range c.fix.Bad {
		var id [32]byte
		if event.DecodeHex32(&id, []byte(bad.ID)) != nil {
			continue
		}
		line, ok := c.fix.Lookup(id)
		if !ok {
			continue
		}
		pf, _ := filter.Parse([]byte(`{"ids":["` + bad.ID + `"]}`))
		n := 0
		err := c.store.Query(pf, func(e *event.Event, raw []byte) error {
			n++
			if got := event.AppendJSON(nil, e); !bytes.Equal(got, line) {
				return fmt.Errorf("id %s: got %s, the valid event is %s", bad.ID, got, line)
			}
			return nil
		})
		if err != nil || n != 1 {
			t.Fatalf("id %s: %d results, %v", bad.ID, n, err)
		}
	}
}

func (c *corpus) testResetAndBuild(t *testing.T) {
	// reprocess --all: the indexes go with the verdicts and come back
	// with them.
	if _, err := c.store.ResetVerdicts(); err != nil {
		t.Fatal(err)
	}
	if got, err := query(t, c.store, []filtertest.Filter{{}}); err != nil || len(got) != 0 {
		t.Fatalf("after reset, before verifying: %d events, %v", len(got), err)
	}
	c.drain(t)
	c.checkFilters(t, 2, 60)

	// An archive from before the indexes: Query refuses until they are
	// built; an interrupted build resumes.
	if err := c.store.DropIndexes(); err != nil {
		t.Fatal(err)
	}
	if _, err := query(t, c.store, []filtertest.Filter{{}}); !errors.Is(err, rawstore.ErrNotIndexed) {
		t.Fatalf("query without indexes: %v, want ErrNotIndexed", err)
	}
	defer rawstore.SetIndexBuildBatch(2000)()
	ctx, cancel := context.WithCancel(context.Background())
	first, err := c.store.BuildIndexes(ctx, func(int64) { cancel() })
	if !errors.Is(err, context.Canceled) || first == 0 || first >= int64(len(c.all)) {
		t.Fatalf("interrupted build: %d of %d indexed, %v", first, len(c.all), err)
	}
	if ready, _ := c.store.IndexesReady(); ready {
		t.Fatal("an interrupted build marked the indexes complete")
	}
	rest, err := c.store.BuildIndexes(context.Background(), nil)
	if err != nil || first+rest != int64(len(c.all)) {
		t.Fatalf("resumed build: %d + %d of %d, %v", first, rest, len(c.all), err)
	}
	c.checkFilters(t, 3, 60)
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
