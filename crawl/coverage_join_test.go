package crawl_test

import (
	"reflect"
	"testing"

	"github.com/nostr-archiver/archiver/crawl"
)

func TestJoinCoverage(t *testing.T) {
	c := func(since, until int64, proof string, held, count int64, why string) crawl.RangeCoverage {
		return crawl.RangeCoverage{Since: since, Until: until, Proof: proof, Held: held, Count: count, Why: why}
	}
	in := []crawl.RangeCoverage{
		c(0, 9, crawl.ProofCount, 0, 0, ""),
		c(10, 19, crawl.ProofCount, 5, 5, ""),
		c(20, 29, crawl.ProofUnproven, 3, 4, "short"), // another proof: kept apart
		c(30, 39, crawl.ProofCount, 1, 1, ""),
		c(41, 49, crawl.ProofCount, 1, 1, ""), // a gap: kept apart
		c(50, 59, crawl.ProofNIP77, 2, 0, ""), // another proof
		c(60, 0, crawl.ProofNIP77, 7, 0, ""),  // open top joins
	}
	want := []crawl.RangeCoverage{
		c(0, 19, crawl.ProofCount, 5, 5, ""),
		c(20, 29, crawl.ProofUnproven, 3, 4, "short"),
		c(30, 39, crawl.ProofCount, 1, 1, ""),
		c(41, 49, crawl.ProofCount, 1, 1, ""),
		c(50, 0, crawl.ProofNIP77, 9, 0, ""),
	}
	if got := crawl.JoinCoverage(in); !reflect.DeepEqual(got, want) {
		t.Errorf("JoinCoverage:\n got %+v\nwant %+v", got, want)
	}
}
