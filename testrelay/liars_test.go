package testrelay

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
)

// The knobs that make pages other than a range's newest events, each as
// the relay it copies does it.
func TestLyingPages(t *testing.T) {
	items := synth(100, func(i int) int64 { return 1000 + int64(i) }) // one per second
	ats := func(evs []ev) []int64 {
		var at []int64
		for _, e := range evs {
			at = append(at, e.CreatedAt)
		}
		return at
	}
	t.Run("split stores", func(t *testing.T) {
		r := newRelay(t, Options{SplitStores: 2}, items...)
		evs := decodeEvents(t, dial(t, r.URL()).Req("s", map[string]any{"limit": 10}).Events)
		if len(evs) != 20 {
			t.Fatalf("got %d events, want 10 from each of 2 stores", len(evs))
		}
		// Each store's part is its own newest 10, so the page reaches
		// below the relay's 20 newest; and the parts come one after the
		// other, so the page is out of order where the second begins.
		at := ats(evs)
		if slices.Min(at) >= 1080 || slices.IsSortedFunc(at, func(a, b int64) int { return int(b - a) }) {
			t.Fatalf("created_at %v: want two descending runs reaching below 1080", at)
		}
	})
	t.Run("order breaks after OrderedPages", func(t *testing.T) {
		r := newRelay(t, Options{PageOrder: PageOldest, OrderedPages: 2}, items...)
		c := dial(t, r.URL())
		for i, want := range []int64{1099, 1099, 1009} {
			at := ats(decodeEvents(t, c.Req("o", map[string]any{"limit": 10}).Events))
			if len(at) != 10 || slices.Max(at) != want {
				t.Fatalf("page %d: created_at %v, want 10 up to %d", i+1, at, want)
			}
		}
	})
	t.Run("broken entry ends the scan", func(t *testing.T) {
		o := Options{BrokenEvery: 10}
		first := -1 // the newest broken item
		for i := len(items) - 1; i >= 0; i-- {
			if o.Broken(items[i].ID) {
				first = i
				break
			}
		}
		if first < 1 {
			t.Fatalf("no broken item to test with (newest at %d)", first)
		}
		r := newRelay(t, o, items...)
		c := dial(t, r.URL())
		p := c.Req("b", map[string]any{"limit": 100})
		if p.End.Label != "EOSE" {
			t.Fatalf("ended with %s", p.End.Raw)
		}
		if at := ats(decodeEvents(t, p.Events)); len(at) != 99-first || len(at) > 0 && at[len(at)-1] != items[first].CreatedAt+1 {
			t.Fatalf("created_at %v, want the events newer than the broken one at %d", at, items[first].CreatedAt)
		}
		// Asked below it, the scan runs on to the next broken entry.
		p = c.Req("b2", map[string]any{"until": items[first].CreatedAt - 1, "limit": 1})
		if len(p.Events) != 1 && !o.Broken(items[first-1].ID) {
			t.Fatalf("below the broken entry: %d events", len(p.Events))
		}
		if p = c.Req("b3", map[string]any{"ids": []string{items[first].ID}}); len(p.Events) != 0 {
			t.Fatalf("the broken entry was served by id")
		}
		c.Send("COUNT", "n", map[string]any{})
		if m := c.NextMsg(); m.Label != "CLOSED" {
			t.Fatalf("COUNT without SupportCount: %s", m.Raw)
		}
	})
	t.Run("ties by id descending", func(t *testing.T) {
		wall := synth(30, func(int) int64 { return 5000 })
		r := newRelay(t, Options{TiesDescending: true}, append(wall, items...)...)
		evs := decodeEvents(t, dial(t, r.URL()).Req("t", map[string]any{"limit": 10}).Events)
		ids := make([]string, len(wall))
		for i, it := range wall {
			ids[i] = it.ID
		}
		slices.Sort(ids)
		slices.Reverse(ids)
		var got []string
		for _, e := range evs {
			got = append(got, e.ID)
		}
		if !slices.Equal(got, ids[:10]) {
			t.Fatalf("got %v, want the 10 highest ids, highest first", got)
		}
	})
	t.Run("closed mid-page", func(t *testing.T) {
		r := newRelay(t, Options{ClosedEvery: 2}, items...)
		c := dial(t, r.URL())
		if p := c.Req("c1", map[string]any{"limit": 40}); p.End.Label != "EOSE" || len(p.Events) != 40 {
			t.Fatalf("first page: %d events, %s", len(p.Events), p.End.Raw)
		}
		p := c.Req("c2", map[string]any{"limit": 40})
		var reason string
		if p.End.Label != "CLOSED" || len(p.End.Args) < 2 || json.Unmarshal(p.End.Args[1], &reason) != nil ||
			reason != "error: the relay could not respond fast enough" || len(p.Events) != 20 {
			t.Fatalf("second page: %d events, %s", len(p.Events), p.End.Raw)
		}
	})
	for _, dropped := range []bool{false, true} {
		// Each REQ's EOSE comes first; closed there, its events follow,
		// or never do (dropped): the next REQ's EOSE comes first then.
		t.Run(fmt.Sprintf("EOSE first, dropped %v", dropped), func(t *testing.T) {
			r := newRelay(t, Options{EOSEFirstEvery: 1, EOSEFirstDropped: dropped}, items...)
			c := dial(t, r.URL())
			c.Send("REQ", "e", map[string]any{"limit": 10})
			if m := c.NextMsg(); m.Label != "EOSE" || m.Str(0) != "e" {
				t.Fatalf("first frame %s, want EOSE", m.Raw)
			}
			c.Send("CLOSE", "e")
			c.Send("REQ", "x", map[string]any{"limit": 10})
			late := 0
			for m := c.NextMsg(); m.Label != "EOSE"; m = c.NextMsg() {
				if m.Label != "EVENT" || m.Str(0) != "e" {
					t.Fatalf("got %s, want e's events or x's EOSE", m.Raw)
				}
				late++
			}
			if want := map[bool]int{false: 10, true: 0}[dropped]; late != want {
				t.Errorf("%d events came after e's EOSE, want %d", late, want)
			}
		})
	}
	t.Run("failed query", func(t *testing.T) {
		r := newRelay(t, Options{FailQueryEvery: 1}, items...)
		c := dial(t, r.URL())
		c.Send("REQ", "f", map[string]any{"limit": 10})
		if m := c.NextMsg(); m.Label != "NOTICE" || m.Str(0) != "error: failed to query" {
			t.Fatalf("first frame %s, want the NOTICE", m.Raw)
		}
		if m := c.NextMsg(); m.Label != "EOSE" || m.Str(0) != "f" {
			t.Fatalf("then %s, want EOSE", m.Raw)
		}
	})
}
