package shard

import (
	"errors"
	"math"
	"testing"
)

// checkCover fails unless shards are sorted, disjoint, gap-free and cover
// exactly [since, until], with sane cursors and unique IDs.
func checkCover(t *testing.T, shards []Shard, since, until int64) {
	t.Helper()
	if len(shards) == 0 {
		t.Fatalf("no shards for [%d, %d]", since, until)
	}
	if shards[0].Since != since || shards[len(shards)-1].Until != until {
		t.Fatalf("shards cover [%d, %d], want [%d, %d]", shards[0].Since, shards[len(shards)-1].Until, since, until)
	}
	ids := map[string]bool{}
	for i, s := range shards {
		if s.Since > s.Until || s.Since < 0 {
			t.Fatalf("shard %s: bad range [%d, %d]", s.ID, s.Since, s.Until)
		}
		if s.Cursor > s.Until || s.Cursor < s.Since-1 {
			t.Fatalf("shard %s: cursor %d outside [%d, %d]", s.ID, s.Cursor, s.Since-1, s.Until)
		}
		if ids[s.ID] {
			t.Fatalf("duplicate id %s", s.ID)
		}
		ids[s.ID] = true
		if i > 0 && shards[i-1].Until+1 != s.Since {
			t.Fatalf("shards %s [%d,%d] and %s [%d,%d] are not adjacent", shards[i-1].ID, shards[i-1].Since, shards[i-1].Until, s.ID, s.Since, s.Until)
		}
	}
}

func TestPlanEdges(t *testing.T) {
	tests := []struct {
		name         string
		since, until int64
		n            int
		wantErr      error
		wantSince    int64
		wantShards   int
	}{
		{"one second", 100, 100, 5, nil, 100, 1},
		{"since > until", 101, 100, 2, ErrRange, 0, 0},
		{"until < 0", -10, -1, 2, ErrRange, 0, 0},
		{"zero n", 0, 100, 0, ErrCount, 0, 0},
		{"negative n", 0, 100, -3, ErrCount, 0, 0},
		{"n above seconds", 10, 14, 100, nil, 10, 5},
		{"n equals seconds", 10, 14, 5, nil, 10, 5},
		{"negative since clamped", -50, 9, 2, nil, 0, 2},
		{"until 0 only", math.MinInt64, 0, 3, nil, 0, 1},
		{"whole int64", math.MinInt64, math.MaxInt64, 7, nil, 0, 7},
		{"top of int64", math.MaxInt64 - 3, math.MaxInt64, 10, nil, math.MaxInt64 - 3, 4},
		{"single top second", math.MaxInt64, math.MaxInt64, 3, nil, math.MaxInt64, 1},
		{"typical", 1_600_000_000, 1_760_000_000, 16, nil, 1_600_000_000, 16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			shards, err := Plan(tc.since, tc.until, tc.n, nil)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(shards) != tc.wantShards {
				t.Fatalf("%d shards, want %d", len(shards), tc.wantShards)
			}
			checkCover(t, shards, tc.wantSince, tc.until)
			for i, s := range shards {
				if s.Cursor != s.Until || s.Done() {
					t.Errorf("shard %d starts with cursor %d, until %d", i, s.Cursor, s.Until)
				}
			}
		})
	}
}

func TestPlanUniformIsEven(t *testing.T) {
	shards, err := Plan(1000, 1999, 7, Uniform{})
	if err != nil {
		t.Fatal(err)
	}
	if len(shards) != 7 {
		t.Fatalf("%d shards", len(shards))
	}
	for _, s := range shards {
		if w := s.Until - s.Since + 1; w < 142 || w > 143 {
			t.Errorf("shard %s spans %d seconds, want 142 or 143", s.ID, w)
		}
	}
}

func TestPlanBalancesCount(t *testing.T) {
	// 1 000 events over the first 1 000 s, then 10 000 over 100 s.
	var d Density
	d.ObservePage(0, 999, 1000)
	d.ObservePage(1000, 1099, 10000)
	shards, err := Plan(0, 1099, 4, &d)
	if err != nil {
		t.Fatal(err)
	}
	checkCover(t, shards, 0, 1099)
	if len(shards) != 4 {
		t.Fatalf("%d shards", len(shards))
	}
	for _, s := range shards {
		if n := d.Estimate(s.Since, s.Until); n < 2650 || n > 2850 {
			t.Errorf("shard %s [%d,%d] holds %.0f events, want ~2750", s.ID, s.Since, s.Until, n)
		}
	}
}

func TestPlanConcentratedMassGivesFewerShards(t *testing.T) {
	var d Density
	d.ObservePage(0, 99, 0)
	d.ObservePage(50, 50, 1_000_000) // a wall
	shards, err := Plan(0, 99, 10, &d)
	if err != nil {
		t.Fatal(err)
	}
	checkCover(t, shards, 0, 99)
	if len(shards) >= 10 {
		t.Fatalf("%d shards for a range whose mass sits in one second", len(shards))
	}
}

func TestSplit(t *testing.T) {
	tests := []struct {
		name      string
		s         Shard
		minEvents float64
		ok        bool
		keepSince int64
	}{
		{"fresh", Shard{ID: "0", Since: 0, Until: 99, Cursor: 99}, 0, true, 50},
		{"paged half", Shard{ID: "0", Since: 0, Until: 99, Cursor: 49}, 0, true, 25},
		{"two seconds left", Shard{ID: "0", Since: 10, Until: 99, Cursor: 11}, 0, true, 11},
		{"one second left", Shard{ID: "0", Since: 10, Until: 99, Cursor: 10}, 0, false, 10},
		{"done", Shard{ID: "0", Since: 10, Until: 99, Cursor: 9}, 0, false, 10},
		{"below minimum", Shard{ID: "0", Since: 0, Until: 99, Cursor: 99}, 101, false, 0},
		{"at minimum", Shard{ID: "0", Since: 0, Until: 99, Cursor: 99}, 100, true, 50},
		{"int64 top", Shard{ID: "0", Since: math.MaxInt64 - 1, Until: math.MaxInt64, Cursor: math.MaxInt64}, 0, true, math.MaxInt64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keep, give, ok := Split(tc.s, nil, tc.minEvents)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				if keep != tc.s {
					t.Fatalf("refused split changed the shard: %+v", keep)
				}
				return
			}
			if keep.Since != tc.keepSince {
				t.Errorf("keep.Since = %d, want %d", keep.Since, tc.keepSince)
			}
			if keep.ID != tc.s.ID || keep.Cursor != tc.s.Cursor || keep.Until != tc.s.Until || keep.Splits != tc.s.Splits+1 {
				t.Errorf("keep = %+v, want the same shard with Since raised", keep)
			}
			if give.ID != tc.s.ID+".1" || give.Since != tc.s.Since || give.Until != keep.Since-1 || give.Cursor != give.Until {
				t.Errorf("give = %+v", give)
			}
		})
	}
}

func TestSplitNamesChildrenInOrder(t *testing.T) {
	s := Shard{ID: "3", Since: 0, Until: 1 << 20, Cursor: 1 << 20}
	var ids []string
	for range 3 {
		var give Shard
		var ok bool
		s, give, ok = Split(s, nil, 0)
		if !ok {
			t.Fatal("split refused")
		}
		ids = append(ids, give.ID)
	}
	if ids[0] != "3.1" || ids[1] != "3.2" || ids[2] != "3.3" {
		t.Fatalf("ids %v", ids)
	}
	_, give, _ := Split(Shard{ID: "3.2", Since: 0, Until: 9, Cursor: 9}, nil, 0)
	if give.ID != "3.2.1" {
		t.Fatalf("grandchild id %s", give.ID)
	}
}

func TestSplitAtDensityMedian(t *testing.T) {
	var d Density
	d.ObservePage(0, 899, 100)   // sparse old part
	d.ObservePage(900, 999, 900) // dense recent part
	keep, give, ok := Split(Shard{ID: "0", Since: 0, Until: 999, Cursor: 999}, &d, 0)
	if !ok {
		t.Fatal("split refused")
	}
	if a, b := d.Estimate(give.Since, give.Until), d.Estimate(keep.Since, keep.Cursor); math.Abs(a-b) > 20 {
		t.Fatalf("halves hold %.0f and %.0f events", a, b)
	}
}

func TestAdvance(t *testing.T) {
	s := Shard{ID: "0", Since: 10, Until: 20, Cursor: 20}
	s, err := s.Advance(15)
	if err != nil || s.Cursor != 15 || s.Done() {
		t.Fatalf("advance to 15: %+v %v", s, err)
	}
	if _, err := s.Advance(16); !errors.Is(err, ErrCursor) {
		t.Fatalf("moving up: err = %v", err)
	}
	if s, _ = s.Advance(15); s.Cursor != 15 {
		t.Fatalf("same cursor moved it to %d", s.Cursor)
	}
	s, _ = s.Advance(math.MinInt64)
	if !s.Done() || s.Cursor != 9 {
		t.Fatalf("advance below since: %+v", s)
	}
}
