//go:build liesweep

// A sweep of random combinations of the test relay's lies, asserting that
// a crawl that says drained lost nothing. Not run in CI (its draws change
// with the test relay's options); each case it found has a test of its
// own. Run a range of seeds:
//
//	go test -c -tags liesweep -o /tmp/sweep.test ./crawl
//	cd crawl && for s in $(seq 1 200); do SWEEP_SEED=$s /tmp/sweep.test -test.run TestLieSweep -test.v | grep RESULT; done
//
// SWEEP_LOG names a file for the crawl's debug log.

package crawl_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/testrelay"
	"go.uber.org/zap"
)

func TestLieSweep(t *testing.T) {
	seed, _ := strconv.Atoi(os.Getenv("SWEEP_SEED"))
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	f := liarFixture(t)
	o := testrelay.Options{MaxLimit: []int{50, 100, 37}[rng.IntN(3)]}
	var names []string
	pick := func(name string, p float64, fn func()) {
		if rng.Float64() < p {
			fn()
			names = append(names, name)
		}
	}
	pick("drop", 0.2, func() { o.DropEvery = 300 + rng.IntN(2000) })
	pick("noticeonly", 0.2, func() { o.NoticeOnlyEvery = 3 + rng.IntN(20) })
	pick("dup", 0.3, func() { o.DuplicateEvery = 2 + rng.IntN(20); o.DuplicateInLimit = rng.IntN(2) == 0 })
	pick("omit", 0.2, func() { o.OmitEvery = 2 + rng.IntN(20) })
	pick("split", 0.2, func() { o.SplitStores = 2 + rng.IntN(3) })
	pick("ties", 0.2, func() { o.TiesDescending = true })
	pick("order", 0.15, func() {
		o.PageOrder = []string{testrelay.PageByID, testrelay.PageOldest}[rng.IntN(2)]
		o.OrderedPages = int64(rng.IntN(100))
	})
	pick("closed", 0.2, func() { o.ClosedEvery = 2 + rng.IntN(20) })
	pick("failquery", 0.2, func() { o.FailQueryEvery = 2 + rng.IntN(20) })
	pick("eosefirst", 0.2, func() { o.EOSEFirstEvery = 1 + rng.IntN(10) })
	pick("oor", 0.2, func() { o.ExtraOutOfRange = 1 + rng.IntN(5) })
	pick("count", 0.4, func() { o.SupportCount = true })
	pick("countcap", 0.15, func() { o.SupportCount = true; o.CountCap = 100 + rng.IntN(1000); o.CountCapSilent = rng.IntN(2) == 0 })
	pick("latency", 0.2, func() { o.Latency = time.Duration(rng.IntN(5)) * time.Millisecond })
	pick("subs", 0.15, func() { o.MaxSubsPerConn = 1 + rng.IntN(4) })
	// Later lies draw from their own source: the draws above, and so what
	// a seed named before them, stay as they were.
	more := rand.New(rand.NewPCG(uint64(seed), 11))
	pickMore := func(name string, p float64, fn func()) {
		if more.Float64() < p {
			fn()
			names = append(names, name)
		}
	}
	if o.EOSEFirstEvery > 0 {
		pickMore("dropped", 0.4, func() { o.EOSEFirstDropped = true })
		pickMore("run", 0.4, func() { o.EOSEFirstRun = 2 + more.IntN(5) })
		pickMore("split", 0.2, func() { o.EOSEFirstSplit = time.Duration(10+more.IntN(200)) * time.Millisecond })
	}
	pickMore("broken", 0.15, func() { o.BrokenEvery = 50 + more.IntN(500) })
	opts := crawl.Options{Now: clockAt(f.Until), Shards: []int{1, 2, 4, 8}[rng.IntN(4)]}
	if rng.IntN(3) == 0 {
		opts.StartInFlight, opts.MaxConnsPerRelay, opts.MaxInFlightPerConn = 1, 1, 1
	}
	lg := zap.NewNop()
	if path := os.Getenv("SWEEP_LOG"); path != "" {
		cfg := zap.NewDevelopmentConfig()
		cfg.OutputPaths = []string{path}
		var err error
		if lg, err = cfg.Build(); err != nil {
			t.Fatal(err)
		}
	}
	opts.Logger = lg
	opts.BackoffMin, opts.BackoffMax = time.Millisecond, 20*time.Millisecond
	t.Logf("seed %d: %v relay %+v shards %d", seed, names, o, opts.Shards)
	relay := startRelay(t, o, f.Items)
	a := openArchive(t)
	res := a.crawl(t, opts, relay.URL())
	a.verify(t)
	_ = lg.Sync()
	got := a.exported(t)
	missing := 0
	for _, v := range f.Valid {
		if !got[v.ID] {
			missing++
		}
	}
	rec := a.record(t)
	t.Logf("lies %v, coverage %+v", rec.Lies, rec.Coverage)
	fmt.Printf("RESULT seed=%d finish=%s missing=%d names=%v detail=%.200s\n", seed, res[0].Finish, missing, names, res[0].Detail)
	if res[0].Finish == crawl.FinishDrained && missing > 0 {
		t.Errorf("drained but %d missing", missing)
	}
}
