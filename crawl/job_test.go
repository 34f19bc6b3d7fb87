package crawl

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// relayProbe answers limit-1 probes over events at the given seconds, as
// a relay would (newest first), or as one that ignores until.
func relayProbe(events []int64, ignoreUntil bool, calls, rounds *int) func([][2]int64) ([]int64, bool) {
	return func(parts [][2]int64) ([]int64, bool) {
		*calls += len(parts)
		*rounds++
		out := make([]int64, len(parts))
		for i, p := range parts {
			out[i] = math.MinInt64
			for _, e := range events {
				if e >= p[0] && (e <= p[1] || ignoreUntil) {
					out[i] = max(out[i], e)
				}
			}
		}
		return out, true
	}
}

func TestNarrow(t *testing.T) {
	const now = 1_796_000_000
	spread := func(from, n, step int64) []int64 {
		var out []int64
		for i := range n {
			out = append(out, from+i*step)
		}
		return out
	}
	tests := []struct {
		name        string
		events      []int64
		ignoreUntil bool
		maxWidth    int64 // the occupied seconds found may not exceed this
		maxProbes   int
	}{
		// A month of events in a range from 1970: the plan must find the month.
		{"recent month", spread(1_697_000_000, 2000, 1300), false, 4_000_000, probeRounds * probeInflight},
		{"two clusters", append(spread(1_500_000_000, 100, 60), spread(1_700_000_000, 100, 60)...), false, 1_000_000, probeRounds * probeInflight},
		// Events over the whole range: nothing to narrow, one round more to learn it.
		{"everywhere", spread(1, 4000, now/4000), false, now, 2 * probeInflight},
		// A relay ignoring until answers each probe with its newest event:
		// nothing can be ruled out below it, and nothing is lost.
		{"ignores until", spread(1_697_000_000, 100, 1000), true, now, 2 * probeInflight},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls, rounds := 0, 0
			occ, ok := narrow(0, now, relayProbe(tt.events, tt.ignoreUntil, &calls, &rounds))
			if !ok {
				t.Fatal("narrow found nothing")
			}
			for _, e := range tt.events {
				if occ.Estimate(e, e) != 1 {
					t.Fatalf("event at %d is outside the occupancy %v", e, occ)
				}
			}
			if w := occ.width(); w > tt.maxWidth {
				t.Errorf("occupied width %d > %d: %v", w, tt.maxWidth, occ)
			}
			if calls > tt.maxProbes {
				t.Errorf("%d probes, want <= %d", calls, tt.maxProbes)
			}
			if calls > rounds*probeInflight {
				t.Errorf("%d probes in %d rounds: more than one wave of %d each", calls, rounds, probeInflight)
			}
			if !slices.IsSortedFunc(occ, func(a, b [2]int64) int { return int(a[0] - b[0]) }) {
				t.Errorf("occupancy not in order: %v", occ)
			}
		})
	}
}

func TestNarrowFailures(t *testing.T) {
	if _, ok := narrow(0, 1000, func(p [][2]int64) ([]int64, bool) { return nil, false }); ok {
		t.Error("a failed first round gave a plan")
	}
	none := func(p [][2]int64) ([]int64, bool) {
		out := make([]int64, len(p))
		for i := range out {
			out[i] = math.MinInt64
		}
		return out, true
	}
	if _, ok := narrow(0, 1000, none); ok {
		t.Error("an empty relay gave a plan")
	}
	// A later round failing keeps what the earlier ones found.
	round, calls, rounds := 0, 0, 0
	answer := relayProbe([]int64{500}, false, &calls, &rounds)
	occ, ok := narrow(0, 100_000, func(p [][2]int64) ([]int64, bool) {
		if round++; round > 1 {
			return nil, false
		}
		return answer(p)
	})
	if !ok || occ.Estimate(500, 500) != 1 || occ.width() > 100_000/probeInflight+1 {
		t.Errorf("after a failed second round: %v, %v", occ, ok)
	}
}

// Slices and splits cover their range exactly, in order, within their count.
func TestSlicesCover(t *testing.T) {
	check := func(what string, parts [][2]int64, lo, hi int64, n int) {
		t.Helper()
		if len(parts) > n || len(parts) == 0 {
			t.Errorf("%s: %d slices, want 1..%d", what, len(parts), n)
		}
		next := lo
		for _, p := range parts {
			if p[0] != next || p[1] < p[0] {
				t.Fatalf("%s: slices %v do not tile [%d, %d]", what, parts, lo, hi)
			}
			next = p[1] + 1
		}
		if next != hi+1 {
			t.Errorf("%s: slices %v end at %d, want %d", what, parts, next-1, hi)
		}
	}
	for _, c := range []struct{ lo, hi int64 }{{0, 9}, {0, 0}, {5, 7}, {0, 1_796_000_000}, {-3, 100}} {
		for _, n := range []int{1, 2, 4, 8, 16} {
			check(fmt.Sprintf("timeSlices(%d, %d, %d)", c.lo, c.hi, n), timeSlices(c.lo, c.hi, n), c.lo, c.hi, n)
		}
	}
	occ := occupancy{{0, 10}, {20, 21}, {30, 1000}, {1002, 1003}, {5000, 9000}, {9002, 9002}}
	// The gaps and the occupancy tile the range between them.
	tiles := append(occ.gaps(-5, 9010), occ...)
	slices.SortFunc(tiles, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	check("occupancy and its gaps", tiles, -5, 9010, len(tiles))
	if g := occ.gaps(0, 9002); len(g) != 5 {
		t.Errorf("gaps(0, 9002) = %v, want the 5 inner ones", g)
	}
	for _, n := range []int{2, 4, 8} {
		parts := occ.split(n)
		if len(parts) > n {
			t.Errorf("split(%d) gave %d slices", n, len(parts))
		}
		for _, sl := range occ { // every occupied second is probed
			for _, x := range []int64{sl[0], sl[1]} {
				if !slices.ContainsFunc(parts, func(p [2]int64) bool { return p[0] <= x && x <= p[1] }) {
					t.Errorf("split(%d) = %v leaves out %d", n, parts, x)
				}
			}
		}
	}
}
