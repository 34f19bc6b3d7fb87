package shard

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Leaf is one sub-query of a wall second: the job's filter narrowed to
// since = until = the second, one kind, and (once the kind alone came back
// full) a group of authors.
type Leaf struct {
	Kind int
	// Authors is sorted; nil means every author.
	Authors []string
}

// clone keeps callers from aliasing the plan's author lists.
func (l Leaf) clone() Leaf { return Leaf{Kind: l.Kind, Authors: slices.Clone(l.Authors)} }

func (l Leaf) key() string {
	return strconv.Itoa(l.Kind) + "/" + strings.Join(l.Authors, ",")
}

// WallPlan plans how to drain a wall: one created_at second that holds more
// events than a page, which paging by `until` can neither finish nor skip.
// It splits the second by kind (one leaf per observed kind), then a kind
// whose leaf is still full by halves of its observed authors (more parts if
// a half would name more than maxAuthors), down to single authors; a leaf
// still full at one kind and one author cannot be split and is reported. It
// is pure data: the crawler runs the leaves and reports.
//
// Leaves can only name kinds and authors that were observed. A kind's full
// page shows only some of its authors, so an author none of the answers
// revealed stays hidden and "every leaf came back short" is not proof. It
// is proof when the relay's NIP-45 COUNT for the second is given to
// SetTotal and matched (WallStatus.Verified); otherwise NIP-77 can check.
type WallPlan struct {
	second     int64
	maxAuthors int
	seen       map[int]map[string]bool // kind -> authors observed in the second
	leaves     []leaf                  // creation order, which fixes the order of Next
	index      map[string]int          // Leaf.key -> leaves index
	total      int64                   // COUNT for the second, -1 when unknown
}

type leafState uint8

const (
	proposed     leafState = iota // created, not handed out
	asked                         // handed out by Next
	short                         // came back with fewer events than a page: complete
	full                          // came back full and was split further
	unsplittable                  // full at one kind and one author
)

type leaf struct {
	Leaf
	state    leafState
	events   int
	expanded bool // a full leaf whose children exist
}

// DefaultMaxAuthors keeps author filters well under strfry's default
// maxReqFilterSize (200).
const DefaultMaxAuthors = 100

// NewWallPlan starts a plan for the given second. maxAuthors caps the
// authors named in one leaf (<= 0 means DefaultMaxAuthors).
func NewWallPlan(second int64, maxAuthors int) *WallPlan {
	if maxAuthors <= 0 {
		maxAuthors = DefaultMaxAuthors
	}
	return &WallPlan{
		second: second, maxAuthors: maxAuthors, total: -1,
		seen: map[int]map[string]bool{}, index: map[string]int{},
	}
}

// Second is the created_at second the plan drains.
func (w *WallPlan) Second() int64 { return w.second }

// Observe records an event seen in the second, from the page that revealed
// the wall or from any leaf's answer. A candidate the crawler merely
// suspects (an author active in nearby seconds) may be observed too: its
// leaf costs a query and comes back short if the guess was wrong.
func (w *WallPlan) Observe(kind int, author string) {
	if w.seen[kind] == nil {
		w.seen[kind] = map[string]bool{}
	}
	w.seen[kind][author] = true
}

// Kinds returns, sorted, the kinds observed in the second.
func (w *WallPlan) Kinds() []int { return slices.Sorted(maps.Keys(w.seen)) }

// SetTotal records the relay's NIP-45 COUNT for the second (same base
// filter as the leaves).
func (w *WallPlan) SetTotal(count int64) { w.total = count }

// Next returns the leaves to query now, each exactly once, in a
// deterministic order. It returns nothing while every leaf is out or done.
func (w *WallPlan) Next() []Leaf {
	w.grow()
	var out []Leaf
	for i := range w.leaves {
		if l := &w.leaves[i]; l.state == proposed {
			l.state = asked
			out = append(out, l.clone())
		}
	}
	return out
}

// Report records a leaf's answer: full when it returned a whole page (so
// more may exist), events how many it returned. Reporting a leaf the plan
// does not know (ErrUnknown) or twice (ErrReported) is an error.
func (w *WallPlan) Report(l Leaf, isFull bool, events int) error {
	i, ok := w.index[l.key()]
	if !ok {
		return fmt.Errorf("%w: wall %d leaf %s", ErrUnknown, w.second, l.key())
	}
	lf := &w.leaves[i]
	if lf.state != proposed && lf.state != asked {
		return fmt.Errorf("%w: wall %d leaf %s", ErrReported, w.second, l.key())
	}
	lf.events = events
	switch {
	case !isFull:
		lf.state = short
	case len(lf.Authors) == 1:
		lf.state = unsplittable
	default:
		lf.state = full
	}
	return nil
}

// WallStatus is where a wall stands.
type WallStatus struct {
	// Complete: there are leaves, every one came back short, no observed
	// kind or author is left uncovered, and Found >= Total when Total is
	// known.
	Complete bool
	// Verified: Complete, and against a known Total. An unverified
	// complete wall may still hide events of authors (or kinds) no answer
	// showed.
	Verified bool
	// Found sums the events of the leaves that came back short (they are
	// disjoint, so no event is counted twice).
	Found int64
	// Total is the COUNT given to SetTotal, -1 when unknown.
	Total int64
	// Outstanding leaves were handed out (or are about to be) and not yet
	// reported.
	Outstanding []Leaf
	// Unsplittable leaves came back full at one kind and one author: the
	// relay holds more than a page for that pair in this second, and only
	// another method (NIP-77, a bigger page) can finish them.
	Unsplittable []Leaf
}

// Status reports progress, proposing leaves for anything newly observed.
func (w *WallPlan) Status() WallStatus {
	w.grow()
	st := WallStatus{Total: w.total}
	for _, l := range w.leaves {
		switch l.state {
		case proposed, asked:
			st.Outstanding = append(st.Outstanding, l.clone())
		case short:
			st.Found += int64(l.events)
		case unsplittable:
			st.Unsplittable = append(st.Unsplittable, l.clone())
		}
	}
	st.Complete = len(w.leaves) > 0 && len(st.Outstanding) == 0 && len(st.Unsplittable) == 0 &&
		(w.total < 0 || st.Found >= w.total)
	st.Verified = st.Complete && w.total >= 0
	return st
}

// grow creates the leaves that observations and answers call for: one per
// new kind, parts of the authors of every full leaf, and a leaf for authors
// seen under a kind after that kind was split.
func (w *WallPlan) grow() {
	for i := range w.leaves {
		l := w.leaves[i]
		if l.state != full || l.expanded || l.Authors == nil {
			continue
		}
		w.leaves[i].expanded = true
		w.addParts(l.Kind, l.Authors, 2)
	}
	for _, kind := range slices.Sorted(maps.Keys(w.seen)) {
		i, ok := w.index[Leaf{Kind: kind}.key()]
		if !ok {
			w.add(Leaf{Kind: kind}, proposed)
			continue
		}
		kl := w.leaves[i]
		if kl.state != full {
			continue
		}
		uncovered := w.uncovered(kind)
		switch {
		case len(uncovered) == 0:
		case kl.expanded:
			w.addParts(kind, uncovered, 1)
		case len(uncovered) == 1:
			// The kind's full page came from this one author, so asking for
			// the author alone would return the same page.
			w.leaves[i].expanded = true
			w.add(Leaf{Kind: kind, Authors: uncovered}, unsplittable)
		default:
			w.leaves[i].expanded = true
			w.addParts(kind, uncovered, 2)
		}
	}
}

// addParts proposes leaves for authors (sorted) in at least minParts
// near-equal parts of at most maxAuthors each.
func (w *WallPlan) addParts(kind int, authors []string, minParts int) {
	parts := max(minParts, (len(authors)+w.maxAuthors-1)/w.maxAuthors)
	for p := range parts {
		lo, hi := p*len(authors)/parts, (p+1)*len(authors)/parts
		w.add(Leaf{Kind: kind, Authors: authors[lo:hi:hi]}, proposed)
	}
}

// uncovered returns, sorted, the authors seen under kind that no author leaf
// of that kind names.
func (w *WallPlan) uncovered(kind int) []string {
	covered := map[string]bool{}
	for _, l := range w.leaves {
		if l.Kind == kind {
			for _, a := range l.Authors {
				covered[a] = true
			}
		}
	}
	var out []string
	for _, a := range slices.Sorted(maps.Keys(w.seen[kind])) {
		if !covered[a] {
			out = append(out, a)
		}
	}
	return out
}

func (w *WallPlan) add(l Leaf, st leafState) {
	w.index[l.key()] = len(w.leaves)
	w.leaves = append(w.leaves, leaf{Leaf: l, state: st})
}
