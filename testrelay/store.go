package testrelay

import (
	"cmp"
	"encoding/hex"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/nostr-archiver/archiver/event"
)

// Item is one stored entry. The relay never looks inside Raw: it indexes
// the item by the fields given here (which may disagree with Raw, as a
// forged copy's do) and sends Raw verbatim, so tests control the exact bytes
// a client receives: key order, whitespace, escapes, bad ids and sigs,
// objects that are not events at all.
type Item struct {
	// Raw is the event object as sent inside ["EVENT",<sub>,<Raw>]; with
	// Frame it is the whole WebSocket message instead.
	Raw []byte
	// CreatedAt, Kind, PubKey (hex) and ID (hex, as claimed) are what
	// filters match and what orders the store.
	CreatedAt int64
	Kind      int
	PubKey    string
	ID        string
	// Frame sends Raw as the whole frame, to reproduce frames that are not
	// valid relay messages. Every SubPlaceholder in Raw is replaced by the
	// subscription id (JSON-escaped, without quotes).
	Frame bool
	// Tags are the event's single-letter tags as [letter, value], what tag
	// filters (#e, #p, ...) match; the fixture's trap events and
	// ItemFromEvent fill them.
	Tags [][2]string
}

// letterTags picks the single-letter tags (name and first value) that
// NIP-01 tag filters match.
func letterTags(tags [][]string) [][2]string {
	var out [][2]string
	for _, t := range tags {
		if len(t) >= 2 && len(t[0]) == 1 {
			out = append(out, [2]string{t[0], t[1]})
		}
	}
	return out
}

// SubPlaceholder in a Frame item's Raw stands for the subscription id.
const SubPlaceholder = "${sub}"

// ItemFromEvent returns the item that serves e in its canonical export form
// (event.AppendJSON).
func ItemFromEvent(e *event.Event) Item {
	return Item{
		Raw:       event.AppendJSON(nil, e),
		CreatedAt: e.CreatedAt,
		Kind:      e.Kind,
		PubKey:    hex.EncodeToString(e.PubKey[:]),
		ID:        hex.EncodeToString(e.ID[:]),
		Tags:      letterTags(e.Tags),
	}
}

// store holds items newest first (created_at desc, then id asc per
// NIP-01, then insertion order). Readers take an immutable snapshot without
// locking; Add builds a new one, so serving never waits for a writer.
type store struct {
	mu   sync.Mutex // serializes Add
	snap atomic.Pointer[snapshot]
}

type snapshot struct {
	items []Item

	idsOnce sync.Once
	ids     map[string][]int32 // id -> positions, built on the first ids filter
}

func newStore() *store {
	s := &store{}
	s.snap.Store(&snapshot{})
	return s
}

func compareItems(a, b *Item) int {
	if c := cmp.Compare(b.CreatedAt, a.CreatedAt); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// add merges items into a new snapshot: O(n+m) plus sorting the batch, so
// callers should add in batches.
func (s *store) add(items []Item) {
	if len(items) == 0 {
		return
	}
	batch := slices.Clone(items)
	slices.SortStableFunc(batch, func(a, b Item) int { return compareItems(&a, &b) })

	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.snap.Load().items
	merged := make([]Item, 0, len(old)+len(batch))
	i, j := 0, 0
	for i < len(old) && j < len(batch) {
		if compareItems(&batch[j], &old[i]) < 0 {
			merged = append(merged, batch[j])
			j++
		} else { // ties keep insertion order: what was there first goes first
			merged = append(merged, old[i])
			i++
		}
	}
	merged = append(merged, old[i:]...)
	merged = append(merged, batch[j:]...)
	s.snap.Store(&snapshot{items: merged})
}

func (s *snapshot) idIndex() map[string][]int32 {
	s.idsOnce.Do(func() {
		s.ids = make(map[string][]int32, len(s.items))
		for i := range s.items {
			id := s.items[i].ID
			s.ids[id] = append(s.ids[id], int32(i))
		}
	})
	return s.ids
}

// window returns the positions [lo, hi) whose created_at is within
// [since, until], by binary search: the items are sorted descending.
func (s *snapshot) window(f *filter, ignoreUntil bool) (lo, hi int) {
	n := len(s.items)
	hi = n
	if f.until != nil && !ignoreUntil {
		u := *f.until
		lo = sort.Search(n, func(i int) bool { return s.items[i].CreatedAt <= u })
	}
	if f.since != nil {
		since := *f.since
		hi = sort.Search(n, func(i int) bool { return s.items[i].CreatedAt < since })
	}
	return lo, max(lo, hi)
}

// match appends to dst, in store order (newest first; ties by id
// descending with tiesDesc), the positions that f selects: at most limit
// (negative: all) inside the window, plus up to extra matching positions
// on each side of it.
func (s *snapshot) match(dst []int32, f *filter, limit, extra int, ignoreUntil, tiesDesc bool) []int32 {
	lo, hi := s.window(f, ignoreUntil)
	if extra > 0 && f.until != nil && !ignoreUntil {
		dst = s.outside(dst, f, lo, -1, extra)
	}
	if f.ids != nil {
		start := len(dst)
		idx := s.idIndex()
		for _, id := range f.ids {
			for _, p := range idx[id] {
				if int(p) >= lo && int(p) < hi && f.matchesRest(&s.items[p]) {
					dst = append(dst, p)
				}
			}
		}
		got := dst[start:]
		slices.Sort(got)
		got = slices.Compact(got)
		if limit >= 0 && len(got) > limit {
			got = got[:limit]
		}
		dst = dst[:start+len(got)]
	} else {
		n := 0
		for i := lo; i < hi && (limit < 0 || n < limit); {
			// One second's run, walked backwards when ties go by id
			// descending.
			j := i + 1
			for tiesDesc && j < hi && s.items[j].CreatedAt == s.items[i].CreatedAt {
				j++
			}
			for k := range j - i {
				p := i + k
				if tiesDesc {
					p = j - 1 - k
				}
				if (limit < 0 || n < limit) && f.matchesRest(&s.items[p]) {
					dst = append(dst, int32(p))
					n++
				}
			}
			i = j
		}
	}
	if extra > 0 && f.since != nil {
		dst = s.outside(dst, f, hi-1, +1, extra)
	}
	return dst
}

// outside appends up to n positions matching f's non-time conditions,
// walking from `from` in direction dir (exclusive), in store order. It looks
// at a bounded number of items so a rare author cannot make it scan the
// whole store.
func (s *snapshot) outside(dst []int32, f *filter, from, dir, n int) []int32 {
	const maxScan = 1000
	var found []int32
	for i, steps := from+dir, 0; i >= 0 && i < len(s.items) && len(found) < n && steps < maxScan; i, steps = i+dir, steps+1 {
		if f.matchesRest(&s.items[i]) && (f.ids == nil || slices.Contains(f.ids, s.items[i].ID)) {
			found = append(found, int32(i))
		}
	}
	if dir < 0 {
		slices.Reverse(found)
	}
	return append(dst, found...)
}

// count returns how many events the filters select, ignoring limits
// (NIP-45): one per id, as a relay's store keyed by id counts them (copies
// sharing an id, forged or duplicated, count once). Frame items are not
// events a relay stores, just bytes it sends: they are not counted.
func (s *snapshot) count(filters []filter, ignoreUntil bool) int {
	var pos []int32
	if len(filters) == 1 && filters[0].timeOnly() {
		lo, hi := s.window(&filters[0], ignoreUntil)
		pos = make([]int32, 0, hi-lo)
		for i := lo; i < hi; i++ {
			pos = append(pos, int32(i))
		}
	} else {
		for i := range filters {
			pos = s.match(pos, &filters[i], -1, 0, ignoreUntil, false)
		}
		slices.Sort(pos)
		pos = slices.Compact(pos)
	}
	n := 0
	ids := make(map[string]struct{}, len(pos))
	for _, p := range pos {
		it := &s.items[p]
		if it.Frame {
			continue
		}
		if _, dup := ids[it.ID]; !dup {
			ids[it.ID] = struct{}{}
			n++
		}
	}
	return n
}
