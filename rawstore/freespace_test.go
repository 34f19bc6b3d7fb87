package rawstore

import (
	"testing"
	"time"
)

// room asks the file system again unless a recent reading, less what was
// admitted since, leaves statfsSlack beyond the need.
func TestFreeSpaceAdmit(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name       string
		avail      uint64        // the reading (0: none taken)
		age        time.Duration // how long ago
		need, cost uint64
		want       bool
	}{
		{"no reading yet", 0, 0, mib, mib, false},
		{"far from full", 10 << 30, 0, 10 * mib, 3 * mib, true},
		{"reading too old", 10 << 30, 2 * statfsEvery, 10 * mib, 3 * mib, false},
		{"within the slack", 10*mib + statfsSlack + 2*mib, 0, 10 * mib, 3 * mib, false},
		{"just past the slack", 10*mib + statfsSlack + 3*mib, 0, 10 * mib, 3 * mib, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s freeSpace
			if tc.avail > 0 {
				s.measured(tc.avail)
				s.at = s.at.Add(-tc.age)
			}
			if got := s.admit(tc.need, tc.cost); got != tc.want {
				t.Fatalf("admit = %v, want %v", got, tc.want)
			}
			if tc.want && s.avail != tc.avail-tc.cost {
				t.Errorf("reading after admitting %d bytes: %d, want %d", tc.cost, s.avail, tc.avail-tc.cost)
			}
		})
	}
	// What is admitted wears the reading down until it vouches no more.
	var s freeSpace
	s.measured(statfsSlack + 100*mib)
	n := 0
	for s.admit(mib, 10*mib) {
		n++
	}
	if n != 9 {
		t.Errorf("%d writes of 10 MiB admitted against %d MiB beyond the slack, want 9", n, 100)
	}
}
