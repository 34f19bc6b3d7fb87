package crawl_test

import (
	"encoding/hex"
	"slices"
	"testing"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/testrelay"
)

// Events published to a relay with an old created_at while nothing tailed
// it lie in ranges that earlier runs proved: a later run extends the open
// job from just before its last end and never sees them. With Recheck a
// run checks what lies below its plan against the relay's COUNT or NIP-77
// again, pages again only where the relay now counts more (halving a
// range counted short), and finds them; a relay that answers neither
// proves nothing, and the recheck claims nothing either.
func TestRecheck(t *testing.T) {
	checkLeaks(t)
	for _, tc := range []struct {
		name      string
		relay     testrelay.Options
		malformed int    // objects that are no event, which the relay counts as events
		byPaging  bool   // RecheckByPaging
		proof     string // every range's proof after the recheck; "" for none found
	}{
		{"COUNT", testrelay.Options{MaxLimit: 100, SupportCount: true}, 0, false, crawl.ProofCount},
		// Ranges holding them look short of the COUNT: only paging them
		// again shows what the relay counts (before: unproven on every
		// recheck).
		{"COUNT, malformed objects", testrelay.Options{MaxLimit: 100, SupportCount: true}, 8, false, crawl.ProofCount},
		// Every count marked approximate (HyperLogLog's): ranges are
		// halved while they count more than a page, then paged again
		// where short (before: halved down to single seconds, from the
		// relay's first, without end).
		{"approximate COUNT", testrelay.Options{MaxLimit: 100, SupportCount: true, CountApproximate: true}, 0, false, crawl.ProofPaged},
		{"NIP-77", testrelay.Options{MaxLimit: 100, NIP77: true}, 0, false, crawl.ProofNIP77},
		{"neither", testrelay.Options{MaxLimit: 100}, 0, false, ""},
		// Found only by paging everything again (crawl --recheck).
		{"neither, paged again", testrelay.Options{MaxLimit: 100}, 0, true, crawl.ProofPaged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 23, Events: 3000, Malformed: tc.malformed, CacheDir: fixtureCache(t)})
			if err != nil {
				t.Fatal(err)
			}
			items := f.Chronological()
			// 40 items of one day in the middle of the relay's month
			// arrive after the first crawl.
			late := items[1200:1240]
			relay := startRelay(t, tc.relay, slices.Concat(items[:1200], items[1240:]))
			a := openArchive(t)
			missing := func() int {
				got, n := a.exported(t), 0
				for _, it := range late {
					id, _ := hex.DecodeString(it.ID)
					if _, valid := f.Lookup([32]byte(id)); valid && !got[[32]byte(id)] {
						n++
					}
				}
				return n
			}
			lateValid := missing() // all of them, before any crawl
			run := func(at int64, recheck bool) crawl.Result {
				t.Helper()
				res := a.crawl(t, crawl.Options{Now: clockAt(at), Recheck: recheck, RecheckByPaging: recheck && tc.byPaging}, relay.URL())[0]
				if !res.Drained() {
					t.Fatalf("crawl at %d (recheck %v): %v", at, recheck, res)
				}
				a.verify(t)
				return res
			}
			before := relay.Stats()
			run(f.Until, false)
			full := relay.Stats().REQs - before.REQs
			relay.Add(late...)
			before = relay.Stats()
			run(f.Until+3600, false)
			catchup := relay.Stats().REQs - before.REQs
			if n := missing(); n != lateValid || n < 30 {
				t.Fatalf("a run without recheck found %d of the %d late events: the test proves nothing", lateValid-n, lateValid)
			}
			before = relay.Stats()
			res := run(f.Until+7200, true)
			reqs := relay.Stats().REQs - before.REQs
			rec := a.record(t)
			if tc.proof == "" {
				if n := missing(); n != lateValid {
					t.Errorf("the recheck of a relay without COUNT or NIP-77 found %d late events", lateValid-n)
				}
				for _, c := range rec.Coverage {
					if c.Proof != crawl.ProofPaged {
						t.Errorf("range %+v claims more than paged", c)
					}
				}
				return
			}
			if n := missing(); n != 0 {
				t.Fatalf("the recheck left %d of %d late events missing", n, lateValid)
			}
			assertExactValidSet(t, a, f)
			if res.Proof != tc.proof {
				t.Errorf("proof %q, want %q", res.Proof, tc.proof)
			}
			for _, c := range rec.Coverage {
				if c.Proof != tc.proof {
					t.Errorf("range %+v not proven by %s", c, tc.proof)
				}
			}
			// The late events are in one range of under 4 pages.
			if tc.relay.SupportCount && reqs-catchup > 8 || tc.byPaging && reqs <= catchup {
				t.Errorf("the catch-up with a recheck sent %d REQs, without %d: it paged more than where the events were", reqs, catchup)
			}
			t.Logf("first crawl %d REQs, catch-up %d, catch-up with recheck %d; coverage %+v", full, catchup, reqs, rec.Coverage)
		})
	}
}
