package crawl

import (
	"math"
	"strconv"
	"testing"
)

func TestBoundsWiden(t *testing.T) {
	p := func(v int64) *int64 { return &v }
	str := func(v *int64) string {
		if v == nil {
			return "nil"
		}
		return strconv.FormatInt(*v, 10)
	}
	for _, tc := range []struct {
		b                    bounds
		since, until         *int64
		wantSince, wantUntil string
	}{
		{bounds{}, p(5), p(7), "5", "7"},
		{bounds{untilExclusive: true}, p(5), p(7), "5", "8"},
		{bounds{sinceExclusive: true}, p(5), p(7), "4", "7"},
		{bounds{true, true}, p(5), p(7), "4", "8"},
		{bounds{true, true}, p(0), nil, "nil", "nil"},                               // nothing is older than 0
		{bounds{true, true}, nil, p(math.MaxInt64), "nil", "9223372036854775807"},   // no wrap past the top
		{bounds{untilExclusive: true}, p(3), p(3), "3", "4"},                        // one second alone
		{bounds{sinceExclusive: true, untilExclusive: false}, p(1), p(1), "0", "1"}, // since 1 -> 0
	} {
		s, u := tc.b.widen(tc.since, tc.until)
		if str(s) != tc.wantSince || str(u) != tc.wantUntil {
			t.Errorf("%v widen(%s, %s) = %s, %s; want %s, %s", tc.b, str(tc.since), str(tc.until), str(s), str(u), tc.wantSince, tc.wantUntil)
		}
	}
}
