package crawl

import (
	"reflect"
	"testing"
)

// A run's audit covers only the ranges it paged; what earlier runs
// recorded of the others stands (above all a range never proven).
func TestMergeCoverage(t *testing.T) {
	c := func(since, until int64, proof string) RangeCoverage {
		return RangeCoverage{Since: since, Until: until, Proof: proof}
	}
	for _, tc := range []struct {
		name                 string
		earlier, fresh, want []RangeCoverage
	}{
		{"a resumed run pages only the new top",
			[]RangeCoverage{c(0, 99, ProofUnproven), c(100, 199, ProofCount)},
			[]RangeCoverage{c(200, 0, ProofCount)},
			[]RangeCoverage{c(0, 99, ProofUnproven), c(100, 0, ProofCount)}},
		{"a resumed open job's overlap ends the earlier range below it",
			[]RangeCoverage{c(0, 99, ProofCount), c(100, 199, ProofPaged)},
			[]RangeCoverage{c(190, 0, ProofCount)},
			[]RangeCoverage{c(0, 99, ProofCount), c(100, 189, ProofPaged), c(190, 0, ProofCount)}},
		{"a range paged again inside an earlier one leaves it whole",
			[]RangeCoverage{c(100, 0, ProofUnproven)},
			[]RangeCoverage{c(250, 260, ProofCount)},
			[]RangeCoverage{c(100, 0, ProofUnproven), c(250, 260, ProofCount)}},
		{"catch-ups of a tailed relay do not grow the record",
			[]RangeCoverage{c(0, 199, ProofCount), c(200, 0, ProofCount)},
			[]RangeCoverage{c(250, 260, ProofCount), c(261, 0, ProofCount)},
			[]RangeCoverage{c(0, 0, ProofCount)}},
		{"an earlier open top ends where the new one begins",
			[]RangeCoverage{c(0, 99, ProofCount), c(100, 0, ProofUnproven)},
			[]RangeCoverage{c(250, 0, ProofCount)},
			[]RangeCoverage{c(0, 99, ProofCount), c(100, 249, ProofUnproven), c(250, 0, ProofCount)}},
		{"a range paged again replaces what it covers whole",
			[]RangeCoverage{c(0, 99, ProofUnproven), c(100, 199, ProofUnproven)},
			[]RangeCoverage{c(0, 149, ProofCount)},
			[]RangeCoverage{c(0, 149, ProofCount), c(100, 199, ProofUnproven)}},
		{"the open top replaced by an open top",
			[]RangeCoverage{c(0, 0, ProofUnproven)},
			[]RangeCoverage{c(0, 0, ProofCount)},
			[]RangeCoverage{c(0, 0, ProofCount)}},
		{"a first run", nil,
			[]RangeCoverage{c(0, 9, ProofPaged), c(10, 0, ProofPaged)},
			[]RangeCoverage{c(0, 0, ProofPaged)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mergeCoverage(tc.earlier, tc.fresh); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("merge:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
