package shard

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// span is a closed interval of seconds, for tracking the work left.
type span struct{ lo, hi int64 }

// remaining returns the seconds not yet paged, as merged spans.
func remaining(shards []Shard) []span {
	var out []span
	for _, s := range shards {
		if s.Done() {
			continue
		}
		if n := len(out); n > 0 && out[n-1].hi+1 == s.Since {
			out[n-1].hi = s.Cursor
			continue
		}
		out = append(out, span{s.Since, s.Cursor})
	}
	return out
}

// minus removes [lo, hi] from sorted, merged spans.
func minus(spans []span, lo, hi int64) []span {
	var out []span
	add := func(s span) {
		if n := len(out); n > 0 && out[n-1].hi+1 == s.lo {
			out[n-1].hi = s.hi
			return
		}
		out = append(out, s)
	}
	for _, s := range spans {
		if s.hi < lo || s.lo > hi {
			add(s)
			continue
		}
		if s.lo < lo {
			add(span{s.lo, lo - 1})
		}
		if s.hi > hi {
			add(span{hi + 1, s.hi})
		}
	}
	return out
}

func randomRange(rng *rand.Rand) (since, until int64) {
	switch rng.IntN(5) {
	case 0: // tiny ranges, including single seconds
		since = rng.Int64N(100)
		return since, since + rng.Int64N(4)
	case 1: // up to the int64 top
		return math.MaxInt64 - rng.Int64N(1000), math.MaxInt64
	case 2: // negative since, clamped by Plan
		return -rng.Int64N(1 << 40), rng.Int64N(1 << 20)
	case 3:
		return 0, math.MaxInt64
	}
	since = 1_600_000_000 + rng.Int64N(100_000_000)
	return since, since + rng.Int64N(10_000_000)
}

func randomEstimator(rng *rand.Rand, since, until int64) Estimator {
	if rng.IntN(3) == 0 {
		return Uniform{}
	}
	d := &Density{}
	width := uint64(until) - uint64(since)
	point := func() int64 { return since + int64(rng.Uint64N(width+1)&math.MaxInt64) }
	for range rng.IntN(30) {
		a, b := point(), point()
		a, b = min(a, b), max(a, b)
		if rng.IntN(4) == 0 {
			d.ObserveCount(a, b, rng.Int64N(1e6))
		} else {
			d.ObservePage(a, b, rng.IntN(5000))
		}
	}
	return d
}

// runSequence plays a random plan/steal/advance/release sequence, checking
// the coverage invariant after every step, and returns the final shards.
func runSequence(t *testing.T, seed uint64) []Shard {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	since, until := randomRange(rng)
	est := randomEstimator(rng, max(since, 0), until)
	shards, err := Plan(since, until, 1+rng.IntN(12), est)
	if err != nil {
		t.Fatalf("seed %d: plan: %v", seed, err)
	}
	since = max(since, 0)
	checkCover(t, shards, since, until)
	q, err := NewQueue(shards, est, float64(rng.IntN(3)))
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	everID := map[string]bool{}
	for _, s := range shards {
		everID[s.ID] = true
	}
	held := map[string]Shard{} // what the simulated workers page
	left := remaining(q.Shards())
	for step := range 60 {
		before := q.Shards()
		switch op := rng.IntN(10); {
		case op < 3:
			s, ok := q.Next()
			if !ok {
				break
			}
			if _, dup := held[s.ID]; dup || s.Done() {
				t.Fatalf("seed %d step %d: Next handed out %+v twice or done", seed, step, s)
			}
			if !slices.ContainsFunc(before, func(b Shard) bool { return b.ID == s.ID }) {
				if everID[s.ID] {
					t.Fatalf("seed %d step %d: id %s reused", seed, step, s.ID)
				}
				everID[s.ID] = true
			}
			held[s.ID] = s
		case op < 9 && len(held) > 0:
			ids := slices.Sorted(func(yield func(string) bool) {
				for id := range held {
					if !yield(id) {
						return
					}
				}
			})
			id := ids[rng.IntN(len(ids))]
			cur, err := q.Advance(id, held[id].Cursor) // refresh: a steal may have raised Since
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if cur.Since < held[id].Since {
				t.Fatalf("seed %d: shard %s Since went down", seed, id)
			}
			if cur.Done() {
				delete(held, id)
				break
			}
			if op == 8 {
				if cur.Cursor == math.MaxInt64 {
					break
				}
				if _, err := q.Advance(id, cur.Cursor+1); !errors.Is(err, ErrCursor) {
					t.Fatalf("seed %d: cursor moved up without error: %v", seed, err)
				}
				if err := q.Release(id); err != nil {
					t.Fatal(err)
				}
				delete(held, id)
				break
			}
			width := uint64(cur.Cursor) - uint64(cur.Since)
			next := cur.Cursor - int64(rng.Uint64N(width/2+2)) // may pass below Since
			if rng.IntN(8) == 0 {
				next = cur.Since - 1
			}
			s, err := q.Advance(id, next)
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if next < cur.Cursor {
				left = minus(left, max(next, cur.Since-1)+1, cur.Cursor)
			}
			if s.Done() {
				delete(held, id)
			} else {
				held[id] = s
			}
		}
		after := q.Shards()
		checkCover(t, after, since, until)
		for _, b := range before {
			if !slices.ContainsFunc(after, func(a Shard) bool { return a.ID == b.ID }) {
				t.Fatalf("seed %d step %d: shard %s vanished", seed, step, b.ID)
			}
		}
		if got := remaining(after); !reflect.DeepEqual(got, left) {
			t.Fatalf("seed %d step %d: work left %v, want %v", seed, step, got, left)
		}
	}
	return q.Shards()
}

func TestQueueInvariantRandom(t *testing.T) {
	stolen := 0
	for seed := range uint64(3000) {
		for _, s := range runSequence(t, seed) {
			if strings.Contains(s.ID, ".") {
				stolen++
			}
		}
	}
	if stolen < 1000 { // the sequences must exercise Split, not just paging
		t.Fatalf("only %d shards were stolen across all sequences", stolen)
	}
	t.Logf("%d shards stolen", stolen)
}

func TestQueueDeterministic(t *testing.T) {
	for seed := range uint64(50) {
		a, b := runSequence(t, seed), runSequence(t, seed)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: two runs differ:\n%v\n%v", seed, a, b)
		}
	}
}

func TestQueueHandsOutNewestThenSteals(t *testing.T) {
	shards, _ := Plan(0, 399, 2, nil)
	q, err := NewQueue(shards, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := q.Next()
	b, _ := q.Next()
	if a.ID != "1" || b.ID != "0" {
		t.Fatalf("handed out %s then %s, want 1 then 0", a.ID, b.ID)
	}
	// "0" [0,199] has paged down to 150; "1" [200,399] only to 390, so it
	// has the most left and is the one split.
	if _, err := q.Advance("0", 150); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Advance("1", 390); err != nil {
		t.Fatal(err)
	}
	c, ok := q.Next()
	if !ok || c.ID != "1.1" || c.Since != 200 || c.Until != 295 {
		t.Fatalf("stole %+v", c)
	}
	one, _ := q.Advance("1", 390)
	if one.Since != 296 {
		t.Fatalf("victim now %+v", one)
	}
	// A worker that loses its connection gives its shard back.
	if err := q.Release("0"); err != nil {
		t.Fatal(err)
	}
	if d, _ := q.Next(); d.ID != "0" || d.Cursor != 150 {
		t.Fatalf("released shard came back as %+v", d)
	}
	if _, err := q.Advance("nope", 1); !errors.Is(err, ErrUnknown) {
		t.Fatalf("unknown id: %v", err)
	}
	if err := q.Release("nope"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("unknown id: %v", err)
	}
}

func TestQueueStopsWhenTooSmall(t *testing.T) {
	q, _ := NewQueue([]Shard{{ID: "0", Since: 0, Until: 9, Cursor: 9}}, nil, 20)
	if _, ok := q.Next(); !ok {
		t.Fatal("pending shard not handed out")
	}
	if s, ok := q.Next(); ok {
		t.Fatalf("split a 10-event remainder with minimum 20: %+v", s)
	}
	if q.Done() {
		t.Fatal("done before paging")
	}
	if _, err := q.Advance("0", -1); err != nil {
		t.Fatal(err)
	}
	if !q.Done() {
		t.Fatal("not done after the cursor passed Since")
	}
	if _, ok := q.Next(); ok {
		t.Fatal("work handed out after done")
	}
}

func TestNewQueueRejects(t *testing.T) {
	tests := []struct {
		shards []Shard
		want   error
	}{
		{nil, ErrShards},
		{[]Shard{{ID: "0", Since: 0, Until: 9, Cursor: 9}, {ID: "1", Since: 11, Until: 20, Cursor: 20}}, ErrShards},
		{[]Shard{{ID: "0", Since: 0, Until: 9, Cursor: 9}, {ID: "1", Since: 9, Until: 20, Cursor: 20}}, ErrShards},
		{[]Shard{{ID: "0", Since: 0, Until: 9, Cursor: 9}, {ID: "0", Since: 10, Until: 20, Cursor: 20}}, ErrShards},
		{[]Shard{{ID: "0", Since: -5, Until: 9, Cursor: 9}}, ErrShards},
		{[]Shard{{ID: "0", Since: 5, Until: 4, Cursor: 4}}, ErrShards},
		{[]Shard{{ID: "0", Since: 0, Until: 9, Cursor: 10}}, ErrCursor},
		{[]Shard{{ID: "0", Since: 5, Until: 9, Cursor: 3}}, ErrCursor},
	}
	for i, tc := range tests {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if _, err := NewQueue(tc.shards, nil, 0); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	// Reloaded shards come in any order and may be partly done.
	q, err := NewQueue([]Shard{{ID: "1", Since: 10, Until: 20, Cursor: 9}, {ID: "0", Since: 0, Until: 9, Cursor: 4}}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := q.Next(); s.ID != "0" || s.Cursor != 4 {
		t.Fatalf("resumed %+v", s)
	}
}
