package crawl

import "testing"

func TestEmptySeconds(t *testing.T) {
	for _, c := range []struct {
		name        string
		ats         []int64
		oldest, top int64
		lo, hi      int64
		ok          bool
	}{
		{"above the newest", []int64{10, 11, 12}, 10, 20, 13, 20, true},
		{"an event at the top: a run between events", []int64{10, 14, 20}, 10, 20, 15, 19, true},
		{"widest of several", []int64{10, 12, 19, 20}, 10, 20, 13, 18, true},
		{"none: every second holds an event", []int64{10, 11, 12}, 10, 12, 0, 0, false},
		{"duplicates and unsorted", []int64{20, 12, 10, 12, 20}, 10, 20, 13, 19, true},
		{"cursor above the page's events (over the limit)", []int64{5, 8, 10, 15}, 10, 15, 11, 14, true},
		{"events above an open range's top are not asked about", []int64{10, 30, 40}, 10, 20, 11, 20, true},
		{"one-second page", []int64{10}, 10, 10, 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			lo, hi, ok := emptySeconds(c.ats, c.oldest, c.top)
			if ok != c.ok || (ok && (lo != c.lo || hi != c.hi)) {
				t.Errorf("emptySeconds(%v, %d, %d) = [%d, %d] %v, want [%d, %d] %v", c.ats, c.oldest, c.top, lo, hi, ok, c.lo, c.hi, c.ok)
			}
		})
	}
}
