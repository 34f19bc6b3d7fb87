package shard

import (
	"cmp"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

type pair struct {
	kind   int
	author string
}

// relaySecond is what a relay holds at the wall second, events per (kind,
// author), and the page size it serves. It answers a leaf in (kind, author)
// order; the all-kinds wall page comes in reverse order, as relays without
// the NIP-01 tie rule may do, so that answers reveal different authors.
type relaySecond struct {
	events map[pair]int
	page   int
}

// answer returns one pair per matching event, cut to a page; l == nil is the
// whole second.
func (r relaySecond) answer(l *Leaf) (got []pair, full bool) {
	keys := slices.SortedFunc(maps.Keys(r.events), func(a, b pair) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), strings.Compare(a.author, b.author))
	})
	if l == nil {
		slices.Reverse(keys)
	}
	for _, k := range keys {
		if l != nil && (k.kind != l.Kind || l.Authors != nil && !slices.Contains(l.Authors, k.author)) {
			continue
		}
		for range r.events[k] {
			if len(got) == r.page {
				return got, true
			}
			got = append(got, k)
		}
	}
	return got, false
}

func one(kind int, author string) Leaf { return Leaf{Kind: kind, Authors: []string{author}} }

// drain plays the crawler: observe the wall page, then run leaves until the
// plan has nothing outstanding. It returns the leaves asked, in order.
func drain(t *testing.T, r relaySecond, w *WallPlan) []Leaf {
	t.Helper()
	wall, _ := r.answer(nil)
	for _, e := range wall {
		w.Observe(e.kind, e.author)
	}
	var asked []Leaf
	for round := 0; ; round++ {
		next := w.Next()
		if len(next) == 0 {
			return asked
		}
		if round > 100 {
			t.Fatal("wall plan does not converge")
		}
		for _, l := range next {
			asked = append(asked, l)
			got, isFull := r.answer(&l)
			for _, e := range got {
				w.Observe(e.kind, e.author)
			}
			if err := w.Report(l, isFull, len(got)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestWallSplitsByKind(t *testing.T) {
	r := relaySecond{page: 5, events: map[pair]int{{1, "a"}: 3, {7, "b"}: 2, {7, "c"}: 2}}
	w := NewWallPlan(1700000000, 0)
	asked := drain(t, r, w)
	want := []Leaf{{Kind: 1}, {Kind: 7}}
	if !reflect.DeepEqual(asked, want) {
		t.Fatalf("asked %v, want %v", asked, want)
	}
	st := w.Status()
	if !st.Complete || st.Found != 7 || st.Total != -1 || len(st.Outstanding)+len(st.Unsplittable) != 0 {
		t.Fatalf("status %+v", st)
	}
	if w.Second() != 1700000000 {
		t.Fatal("second")
	}
}

func TestWallSplitsAuthorsDownToSingles(t *testing.T) {
	tests := []struct {
		name         string
		e            int // events of author "e"
		complete     bool
		found        int64
		unsplittable []Leaf
	}{
		{"drained", 3, true, 9, nil},
		{"one author over a page", 5, false, 6, []Leaf{one(1, "e")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := relaySecond{page: 4, events: map[pair]int{
				{1, "a"}: 1, {1, "b"}: 1, {1, "c"}: 1, {1, "d"}: 3, {1, "e"}: tc.e,
			}}
			w := NewWallPlan(5, 0)
			asked := drain(t, r, w)
			// wall page: e e e (d|e): kind 1 is split; its page a b c d
			// shows the rest; then halves until each part is short.
			want := []Leaf{
				{Kind: 1},
				{Kind: 1, Authors: []string{"a", "b"}}, {Kind: 1, Authors: []string{"c", "d", "e"}},
				one(1, "c"), {Kind: 1, Authors: []string{"d", "e"}},
				one(1, "d"), one(1, "e"),
			}
			if !reflect.DeepEqual(asked, want) {
				t.Fatalf("asked %v\nwant %v", asked, want)
			}
			st := w.Status()
			if st.Complete != tc.complete || st.Verified || st.Found != tc.found ||
				!reflect.DeepEqual(st.Unsplittable, tc.unsplittable) || len(st.Outstanding) != 0 {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

func TestWallAuthorPartsRespectMax(t *testing.T) {
	events := map[pair]int{}
	for i := range 10 {
		events[pair{1, string(rune('a' + i))}] = 1
	}
	w := NewWallPlan(5, 3)
	drain(t, relaySecond{page: 9, events: events}, w)
	// The all-kinds page and the kind page came back full and between them
	// showed all 10 authors: 4 parts of at most 3.
	st := w.Status()
	if !st.Complete || st.Found != 10 {
		t.Fatalf("status %+v", st)
	}
	if n := len(w.leaves); n != 5 {
		t.Fatalf("%d leaves, want the kind and 4 author parts", n)
	}
	for _, l := range w.leaves {
		if len(l.Authors) > 3 {
			t.Fatalf("leaf names %d authors", len(l.Authors))
		}
	}
}

func TestWallKindWithOneAuthorIsUnsplittableWithoutAsking(t *testing.T) {
	r := relaySecond{page: 3, events: map[pair]int{{1, "a"}: 10, {2, "b"}: 1}}
	w := NewWallPlan(5, 0)
	asked := drain(t, r, w)
	if len(asked) != 2 {
		t.Fatalf("asked %v; the author-only leaf would return the same page", asked)
	}
	st := w.Status()
	if st.Complete || !reflect.DeepEqual(st.Unsplittable, []Leaf{one(1, "a")}) {
		t.Fatalf("status %+v", st)
	}
}

func TestWallCountMustMatch(t *testing.T) {
	r := relaySecond{page: 5, events: map[pair]int{{1, "a"}: 2, {2, "b"}: 2}}
	w := NewWallPlan(5, 0)
	drain(t, r, w)
	if st := w.Status(); !st.Complete {
		t.Fatalf("status %+v", st)
	}
	w.SetTotal(6) // the relay says two events hide under a kind nobody saw
	if st := w.Status(); st.Complete || st.Total != 6 || st.Found != 4 {
		t.Fatalf("status %+v", st)
	}
	w.SetTotal(4)
	if st := w.Status(); !st.Complete || !st.Verified {
		t.Fatalf("status %+v", st)
	}
}

func TestWallLateObservations(t *testing.T) {
	w := NewWallPlan(5, 0)
	if st := w.Status(); st.Complete {
		t.Fatal("an empty plan is not complete")
	}
	w.Observe(1, "a")
	w.Observe(1, "b")
	leaves := w.Next()
	if !reflect.DeepEqual(leaves, []Leaf{{Kind: 1}}) {
		t.Fatalf("first round %v", leaves)
	}
	if len(w.Next()) != 0 {
		t.Fatal("a leaf was handed out twice")
	}
	if err := w.Report(Leaf{Kind: 1}, true, 2); err != nil {
		t.Fatal(err)
	}
	if got := w.Next(); !reflect.DeepEqual(got, []Leaf{one(1, "a"), one(1, "b")}) {
		t.Fatalf("halves %v", got)
	}
	// Another copy of the page reveals a kind and an author nobody asked about.
	w.Observe(3, "z")
	w.Observe(1, "c")
	w.Observe(1, "d")
	got := w.Next()
	want := []Leaf{{Kind: 1, Authors: []string{"c", "d"}}, {Kind: 3}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("late leaves %v, want %v", got, want)
	}
	st := w.Status()
	if st.Complete || len(st.Outstanding) != 4 {
		t.Fatalf("status %+v", st)
	}
	got[0].Authors[0] = "mutated" // callers get copies
	if err := w.Report(Leaf{Kind: 1, Authors: []string{"c", "d"}}, false, 1); err != nil {
		t.Fatal(err)
	}
}

func TestWallReportErrors(t *testing.T) {
	w := NewWallPlan(5, 0)
	w.Observe(1, "a")
	w.Next()
	if err := w.Report(Leaf{Kind: 2}, false, 0); !errors.Is(err, ErrUnknown) {
		t.Fatalf("unknown leaf: %v", err)
	}
	if err := w.Report(Leaf{Kind: 1}, false, 1); err != nil {
		t.Fatal(err)
	}
	if err := w.Report(Leaf{Kind: 1}, false, 1); !errors.Is(err, ErrReported) {
		t.Fatalf("second report: %v", err)
	}
}
