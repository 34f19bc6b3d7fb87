package testrelay

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/nostr-archiver/archiver/event"
)

// classify is a reference verifier: the reason a copy is bad, or "valid".
func classify(raw []byte) (string, *event.Event) {
	e, err := event.Parse(raw)
	if err != nil {
		return ReasonMalformed, nil
	}
	if id, _ := e.ComputeID(nil); id != e.ID {
		return ReasonIDMismatch, e
	}
	pk, err := schnorr.ParsePubKey(e.PubKey[:])
	if err != nil {
		return ReasonBadPubKey, e
	}
	sig, err := schnorr.ParseSignature(e.Sig[:])
	if err != nil || !sig.Verify(e.ID[:], pk) {
		return ReasonBadSig, e
	}
	return "valid", e
}

var fullFixture = FixtureOptions{
	Seed: 7, Events: 400, Wall: 1000, UnsplittableWall: 600,
	ForgedIDs: 10, RandomIDs: 5, BadSigs: 5, BadPubKeys: 5,
	Malformed: len(malformedObjects), MalformedFrames: len(malformedFrames),
	Duplicates: 10, Lookalikes: 10, Varied: 20,
}

// fixtureCache is where the tests that are not about generating a
// fixture cache theirs across runs, as the other packages' tests do (""
// without a cache dir: then each run signs its own).
func fixtureCache() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "archiver-test-fixtures")
}

func generate(t testing.TB, o FixtureOptions) *Fixture {
	t.Helper()
	f, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFixtureTruth(t *testing.T) {
	o := fullFixture
	f := generate(t, o)

	if want := o.Events + o.Wall + o.UnsplittableWall + o.Lookalikes; len(f.Valid) != want {
		t.Fatalf("%d valid events, want %d", len(f.Valid), want)
	}
	if !slices.IsSortedFunc(f.Valid, func(a, b ValidEvent) int { return bytes.Compare(a.ID[:], b.ID[:]) }) {
		t.Fatal("Valid is not sorted by id")
	}
	badByRaw := map[string]BadCopy{}
	for _, b := range f.Bad {
		badByRaw[string(b.Raw)] = b
	}
	served := map[[32]byte]int{}
	reasons := map[string]int{}
	for i, it := range f.Items {
		if it.CreatedAt < f.Since || it.CreatedAt > f.Until {
			t.Errorf("item %d at %d outside [%d, %d]", i, it.CreatedAt, f.Since, f.Until)
		}
		if it.Frame {
			b, ok := badByRaw[string(it.Raw)]
			if !ok || !b.Frame || b.Reason != ReasonMalformed {
				t.Errorf("frame item %q not recorded as a malformed frame", it.Raw)
			}
			if wellFormedEventFrame(bytes.ReplaceAll(it.Raw, []byte(SubPlaceholder), []byte("s"))) {
				t.Errorf("frame item %q is a well-formed EVENT frame", it.Raw)
			}
			continue
		}
		verdict, e := classify(it.Raw)
		reasons[verdict]++
		if verdict != "valid" {
			b, ok := badByRaw[string(it.Raw)]
			if !ok || b.Reason != verdict || b.ID != it.ID {
				t.Errorf("item %q is %s, recorded as %+v", it.Raw, verdict, b)
			}
			continue
		}
		line, ok := f.Lookup(e.ID)
		if !ok {
			t.Fatalf("valid item %s missing from Valid", it.ID)
		}
		if got := event.AppendJSON(nil, e); !bytes.Equal(got, line) {
			t.Errorf("canonical form of %q is\n%s, Valid says\n%s", it.Raw, got, line)
		}
		if it.ID != hex.EncodeToString(e.ID[:]) || it.PubKey != hex.EncodeToString(e.PubKey[:]) ||
			it.CreatedAt != e.CreatedAt || it.Kind != e.Kind {
			t.Errorf("item fields %+v disagree with its event", it)
		}
		served[e.ID]++
	}
	for _, v := range f.Valid {
		if served[v.ID] == 0 {
			t.Errorf("valid event %x is never served", v.ID)
		}
	}
	for _, want := range []struct {
		reason string
		n      int
	}{
		{"valid", len(f.Valid) + o.Duplicates},
		{ReasonIDMismatch, o.ForgedIDs + o.RandomIDs},
		{ReasonBadSig, o.BadSigs},
		{ReasonBadPubKey, o.BadPubKeys},
		{ReasonMalformed, o.Malformed},
	} {
		if reasons[want.reason] != want.n {
			t.Errorf("%d items are %s, want %d", reasons[want.reason], want.reason, want.n)
		}
	}
	if len(f.Bad) != o.ForgedIDs+o.RandomIDs+o.BadSigs+o.BadPubKeys+o.Malformed+o.MalformedFrames {
		t.Errorf("%d bad copies recorded", len(f.Bad))
	}
	forgedOfValid := 0
	for _, b := range f.Bad {
		var id [32]byte
		if event.DecodeHex32(&id, []byte(b.ID)) == nil {
			if _, ok := f.Lookup(id); ok {
				forgedOfValid++
				if b.Reason != ReasonIDMismatch {
					t.Errorf("copy of a valid id is %s", b.Reason)
				}
			}
		}
	}
	if forgedOfValid != o.ForgedIDs {
		t.Errorf("%d bad copies share a valid id, want %d", forgedOfValid, o.ForgedIDs)
	}
	for _, id := range f.Duplicated {
		if served[id] != 2 {
			t.Errorf("duplicated %x served %d times", id, served[id])
		}
	}

	t.Run("varied", func(t *testing.T) {
		var all []byte
		for _, it := range f.Items {
			var id [32]byte
			if event.DecodeHex32(&id, []byte(it.ID)) != nil || !slices.Contains(f.Varied, id) {
				continue
			}
			if line, _ := f.Lookup(id); bytes.Equal(line, it.Raw) {
				t.Errorf("varied %s is served canonically", it.ID)
			}
			all = append(all, it.Raw...)
		}
		if len(f.Varied) != o.Varied {
			t.Fatalf("%d varied, want %d", len(f.Varied), o.Varied)
		}
		for _, esc := range []string{`\/`, `\u00e9`, `\u003c`, "\n", `\ud83d`} {
			if !bytes.Contains(all, []byte(esc)) {
				t.Errorf("no varied event contains %q", esc)
			}
		}
	})
	t.Run("lookalikes", func(t *testing.T) {
		nested := 0
		for _, it := range f.Items {
			var id [32]byte
			if event.DecodeHex32(&id, []byte(it.ID)) != nil || !slices.Contains(f.Lookalikes, id) {
				continue
			}
			if !bytes.Contains(it.Raw, []byte(`\"id\":\"`)) || !bytes.Contains(it.Raw, []byte(`\"created_at\":123`)) {
				t.Errorf("lookalike without lookalikes: %s", it.Raw)
			}
			if bytes.HasPrefix(it.Raw, []byte(`{"lookalike":{"id":"`)) {
				nested++
			}
		}
		if len(f.Lookalikes) != o.Lookalikes || nested != o.Lookalikes/2 {
			t.Errorf("%d lookalikes, %d nested", len(f.Lookalikes), nested)
		}
	})
	t.Run("walls", func(t *testing.T) {
		perKind := map[int]int{}
		perCell := map[[2]string]int{}
		unspl := map[[2]string]int{}
		for _, v := range f.Valid {
			x, ok := parseExportLine(v.Line)
			if !ok {
				t.Fatalf("valid line not in export layout: %s", v.Line)
			}
			switch x.createdAt {
			case f.WallAt:
				perKind[x.kind]++
				perCell[[2]string{string(rune(x.kind)), string(x.pubkey)}]++
			case f.UnsplittableAt:
				unspl[[2]string{string(rune(x.kind)), string(x.pubkey)}]++
			}
		}
		total, biggest := 0, 0
		for _, n := range perKind {
			total += n
			biggest = max(biggest, n)
		}
		if total != o.Wall || biggest <= DefaultMaxLimit {
			t.Errorf("wall of %d, biggest kind %d: splitting by kind alone should not suffice", total, biggest)
		}
		for cell, n := range perCell {
			if n >= DefaultMaxLimit {
				t.Errorf("wall cell %v has %d events, not under a page", cell, n)
			}
		}
		if len(unspl) != 1 {
			t.Errorf("unsplittable wall has %d (kind, author) cells, want 1", len(unspl))
		}
		for _, n := range unspl {
			if n != o.UnsplittableWall {
				t.Errorf("unsplittable wall of %d, want %d", n, o.UnsplittableWall)
			}
		}
	})
}

// wellFormedEventFrame reports whether b is ["EVENT",<string>,<object>].
func wellFormedEventFrame(b []byte) bool {
	var a []json.RawMessage
	if json.Unmarshal(b, &a) != nil || len(a) != 3 {
		return false
	}
	var label, sub string
	return json.Unmarshal(a[0], &label) == nil && label == "EVENT" &&
		json.Unmarshal(a[1], &sub) == nil && len(a[2]) > 0 && a[2][0] == '{'
}

func TestFixtureDeterministic(t *testing.T) {
	o := FixtureOptions{Seed: 1, Events: 50, Wall: 20, Varied: 5, Malformed: 3, ForgedIDs: 2, Lookalikes: 4}
	a, b := generate(t, o), generate(t, o)
	if !sameItems(a.Items, b.Items) || !slices.EqualFunc(a.Valid, b.Valid, func(x, y ValidEvent) bool {
		return x.ID == y.ID && bytes.Equal(x.Line, y.Line)
	}) {
		t.Fatal("same seed, different fixtures")
	}
	o.Seed = 2
	if c := generate(t, o); sameItems(a.Items, c.Items) {
		t.Fatal("different seeds, same fixture")
	}
}

func sameItems(a, b []Item) bool {
	return slices.EqualFunc(a, b, func(x, y Item) bool {
		return bytes.Equal(x.Raw, y.Raw) && x.ID == y.ID && x.PubKey == y.PubKey &&
			x.CreatedAt == y.CreatedAt && x.Kind == y.Kind && x.Frame == y.Frame
	})
}

func TestFixtureCache(t *testing.T) {
	dir := t.TempDir()
	o := FixtureOptions{Seed: 3, Events: 300, Wall: 30, BadSigs: 2, Varied: 3, CacheDir: dir}
	first := generate(t, o)
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("cache files %v", files)
	}
	cached := generate(t, o)
	if !sameItems(first.Items, cached.Items) {
		t.Fatal("fixture from the cache differs")
	}
	// A damaged or stale cache is regenerated, not trusted.
	data, _ := os.ReadFile(files[0])
	for _, damage := range [][]byte{data[:len(data)/2], bytes.Replace(data, []byte(`"kind":`), []byte(`"kind": `), 1)} {
		if err := os.WriteFile(files[0], damage, 0o644); err != nil {
			t.Fatal(err)
		}
		if again := generate(t, o); !sameItems(first.Items, again.Items) {
			t.Fatal("fixture after cache damage differs")
		}
	}
	if again, _ := os.ReadFile(files[0]); !bytes.Equal(again, data) {
		t.Fatal("damaged cache not rewritten")
	}
}

func TestFixtureOptionsValidate(t *testing.T) {
	for _, o := range []FixtureOptions{
		{Events: -1}, {Events: 5, Varied: 6}, {Events: 5, Authors: -1}, {Since: 100, Until: 105},
		{Wall: 10, WallKinds: []int{}}, {Authors: 3, WallAuthors: 4},
	} {
		if _, err := Generate(o); !errors.Is(err, ErrInvalidFixture) {
			t.Errorf("Generate(%+v) = %v, want ErrInvalidFixture", o, err)
		}
	}
}

// TestFixtureThroughRelay serves a fixture and reads every valid event
// back, splitting the wall second by kind, then by author, as a crawler
// would.
func TestFixtureThroughRelay(t *testing.T) {
	o := FixtureOptions{Seed: 11, Events: 2000, Wall: 1000, Duplicates: 5, Varied: 5, CacheDir: fixtureCache()}
	f := generate(t, o)
	r := newRelay(t, Options{}, f.Items...)
	c := dial(t, r.URL())

	got := map[string]bool{}
	collect := func(p page) (events []ev, fresh int) {
		events = decodeEvents(t, p.Events)
		for _, e := range events {
			if !got[e.ID] {
				got[e.ID] = true
				fresh++
			}
		}
		return events, fresh
	}
	until := f.Until
	for {
		evs, fresh := collect(c.Req("all", map[string]any{"until": until, "limit": 500}))
		if fresh == 0 {
			break
		}
		oldest := evs[len(evs)-1].CreatedAt
		if oldest == until && len(evs) == 500 { // a full page inside one second: a wall
			if until != f.WallAt {
				t.Fatalf("unexpected wall at %d", until)
			}
			for _, k := range defaultWallKinds {
				kevs, _ := collect(c.Req("k", map[string]any{"since": until, "until": until, "kinds": []int{k}, "limit": 500}))
				if len(kevs) < 500 {
					continue
				}
				for _, a := range f.Authors {
					aevs, _ := collect(c.Req("a", map[string]any{"since": until, "until": until, "kinds": []int{k}, "authors": []string{a}, "limit": 500}))
					if len(aevs) >= 500 {
						t.Fatalf("kind %d author %s still fills a page", k, a)
					}
				}
			}
			oldest = until - 1
		}
		until = oldest
	}
	for _, v := range f.Valid {
		if !got[hex.EncodeToString(v.ID[:])] {
			t.Fatalf("valid event %x not read back (read %d of %d)", v.ID, len(got), len(f.Valid))
		}
	}
}

func TestReadJSONL(t *testing.T) {
	f := generate(t, FixtureOptions{Seed: 5, Events: 20, Lookalikes: 2}) // varied events span lines
	var in bytes.Buffer
	for _, it := range f.Items {
		in.Write(it.Raw)
		in.WriteString("\n\n")
	}
	items, err := ReadJSONL(&in)
	if err != nil {
		t.Fatal(err)
	}
	if !sameItems(items, f.Items) {
		t.Fatal("items read back differ")
	}
	_, err = ReadJSONL(strings.NewReader(string(f.Items[0].Raw) + "\n{\"id\":1}\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad line: %v", err)
	}
}

func FuzzParseExportLine(f *testing.F) {
	fx, err := Generate(FixtureOptions{Seed: 9, Events: 3, Malformed: 4})
	if err != nil {
		f.Fatal(err)
	}
	for _, it := range fx.Items {
		f.Add(it.Raw)
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		x, ok := parseExportLine(line)
		if !ok {
			return
		}
		e, err := event.Parse(line)
		if err != nil {
			return // the fast path does not check tags and content
		}
		if x.id != e.ID || x.createdAt != e.CreatedAt || x.kind != e.Kind || string(x.pubkey) != hex.EncodeToString(e.PubKey[:]) {
			t.Fatalf("fast path %+v disagrees with event.Parse %+v", x, e)
		}
	})
}

func FuzzAppendEscaped(f *testing.F) {
	for _, w := range words {
		f.Add(w)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		var back string
		if err := json.Unmarshal(appendEscaped(nil, s), &back); err != nil || back != s {
			t.Fatalf("%q escaped as %s reads back as %q (%v)", s, appendEscaped(nil, s), back, err)
		}
	})
}
