package crawl_test

import (
	"testing"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/testrelay"
)

// A relay whose COUNT is capped (marked approximate, or not) proves nothing
// of a range holding more than the cap, but its parts under the cap are
// counted exactly: an honest relay's ranges are proven by them (they were
// only paged), and a relay that leaves the same events out of every page
// shows them missing (it was drained, 60 of 3,000 lost).
func TestCappedCountInParts(t *testing.T) {
	checkLeaks(t)
	f := liarFixture(t)
	for _, tc := range []struct {
		name   string
		relay  testrelay.Options
		finish string
		proof  string // of a drained relay
	}{
		{"honest", testrelay.Options{MaxLimit: 50, SupportCount: true, CountCap: 500}, crawl.FinishDrained, crawl.ProofCount},
		{"leaves events out", testrelay.Options{MaxLimit: 50, SupportCount: true, CountCap: 500, OmitEvery: 50, OmitForever: true}, crawl.FinishUnproven, ""},
		// Capped without saying so (a relay counting what a query capped
		// at its limit returns): shown by paging over the count once,
		// then counted in parts.
		{"silent, honest", testrelay.Options{MaxLimit: 50, SupportCount: true, CountCap: 200, CountCapSilent: true}, crawl.FinishDrained, crawl.ProofCount},
		{"silent, leaves events out", testrelay.Options{MaxLimit: 50, SupportCount: true, CountCap: 200, CountCapSilent: true, OmitEvery: 50, OmitForever: true}, crawl.FinishUnproven, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			relay := startRelay(t, tc.relay, f.Items)
			a := openArchive(t)
			res := a.crawl(t, crawl.Options{Now: clockAt(f.Until), Shards: 2}, relay.URL())[0]
			a.verify(t)
			if res.Finish != tc.finish || res.Proof != tc.proof {
				t.Errorf("the crawl says %v, proof %q: want %s, %s", res, res.Proof, tc.finish, tc.proof)
			}
			rec := a.record(t)
			t.Logf("%d COUNTs; coverage %+v", relay.Stats().COUNTs, rec.Coverage)
		})
	}
}
