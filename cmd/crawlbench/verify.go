package main

import (
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"time"

	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/testrelay"
)

// baselineResult is the plain btcec verify loop's speed.
type baselineResult struct {
	Events  int
	Elapsed time.Duration
	CPU     time.Duration // of the verifying thread
}

// verifyBaseline verifies n fixture events with btcec's schnorr package
// on one goroutine, parsing key and signature every time as a naive
// verifier does: the per-core figure the archiver's verify pool is
// compared with.
func verifyBaseline(n int, seed uint64, cacheDir string) (baselineResult, error) {
	fx, err := testrelay.Generate(testrelay.FixtureOptions{Events: n, Seed: seed, CacheDir: cacheDir})
	if err != nil {
		return baselineResult{}, err
	}
	evs := make([]*event.Event, len(fx.Valid))
	for i, v := range fx.Valid {
		if evs[i], err = event.Parse(v.Line); err != nil {
			return baselineResult{}, fmt.Errorf("fixture event %d: %w", i, err)
		}
	}
	// One OS thread, so its CPU time is the loop's whatever else runs on
	// the machine.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start, cpu0 := time.Now(), cpuTime(true)
	for _, e := range evs {
		pk, err := schnorr.ParsePubKey(e.PubKey[:])
		if err != nil {
			return baselineResult{}, err
		}
		sig, err := schnorr.ParseSignature(e.Sig[:])
		if err != nil {
			return baselineResult{}, err
		}
		if !sig.Verify(e.ID[:], pk) {
			return baselineResult{}, fmt.Errorf("fixture event %x does not verify", e.ID)
		}
	}
	return baselineResult{Events: len(evs), Elapsed: time.Since(start), CPU: cpuTime(true) - cpu0}, nil
}

// reprocessLine is the summary `archiver reprocess` prints.
var reprocessLine = regexp.MustCompile(`^verified (\d+) copies in (\S+) `)

// parseReprocess reads the pool's own count and time (from opening the
// pool to the last verdict, without process start and store open/close)
// out of reprocess's summary line.
func parseReprocess(line string) (n int64, d time.Duration, ok bool) {
	m := reprocessLine.FindStringSubmatch(line)
	if m == nil {
		return 0, 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, 0, false
	}
	if d, err = time.ParseDuration(m[2]); err != nil {
		return 0, 0, false
	}
	return n, d, true
}
