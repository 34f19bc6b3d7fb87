package main

import (
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"time"

	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/lazyparse"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/testrelay"
)

// verifyResult is the speed of one verify loop on one goroutine.
type verifyResult struct {
	Events  int
	Elapsed time.Duration
	CPU     time.Duration // of the verifying thread
}

// fixtureEvents returns the raw lines and parsed events of the first n
// valid fixture events.
func fixtureEvents(n int, seed uint64, cacheDir string) ([][]byte, []*event.Event, error) {
	fx, err := testrelay.Generate(testrelay.FixtureOptions{Events: n, Seed: seed, CacheDir: cacheDir})
	if err != nil {
		return nil, nil, err
	}
	raws := make([][]byte, len(fx.Valid))
	evs := make([]*event.Event, len(fx.Valid))
	for i, v := range fx.Valid {
		raws[i] = v.Line
		if evs[i], err = event.Parse(v.Line); err != nil {
			return nil, nil, fmt.Errorf("fixture event %d: %w", i, err)
		}
	}
	return raws, evs, nil
}

// authors counts the distinct pubkeys of evs.
func authors(evs []*event.Event) int {
	seen := make(map[[32]byte]bool)
	for _, e := range evs {
		seen[e.PubKey] = true
	}
	return len(seen)
}

// onOneThread times loop on one OS thread, so that its CPU time is the
// loop's whatever else runs on the machine.
func onOneThread(events int, loop func() error) (verifyResult, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start, cpu0 := time.Now(), cpuTime(true)
	if err := loop(); err != nil {
		return verifyResult{}, err
	}
	return verifyResult{Events: events, Elapsed: time.Since(start), CPU: cpuTime(true) - cpu0}, nil
}

// verifyBaseline verifies the events with btcec's schnorr package,
// parsing key and signature every time as a naive verifier does: the
// per-core figure the archiver's verify pool is compared with.
func verifyBaseline(evs []*event.Event) (verifyResult, error) {
	return onOneThread(len(evs), func() error {
		for _, e := range evs {
			pk, err := schnorr.ParsePubKey(e.PubKey[:])
			if err != nil {
				return err
			}
			sig, err := schnorr.ParseSignature(e.Sig[:])
			if err != nil {
				return err
			}
			if !sig.Verify(e.ID[:], pk) {
				return fmt.Errorf("fixture event %x does not verify", e.ID)
			}
		}
		return nil
	})
}

// verifyJudge judges the same events from their raw bytes as one verify
// worker does (parse, recompute the id, batch-verify with a fresh key
// cache), a pool worker's chunk at a time: the verifier's own per-core speed,
// without the store's reads and writes that (d) includes.
func verifyJudge(raws [][]byte, evs []*event.Event) (verifyResult, error) {
	const chunk = lazyparse.JudgeChunk
	j := lazyparse.NewJudge(lazyparse.DefaultVerifiers()())
	items := make([]rawstore.Pending, chunk)
	vs := make([]rawstore.Verdict, chunk)
	return onOneThread(len(raws), func() error {
		for lo := 0; lo < len(raws); lo += chunk {
			k := min(chunk, len(raws)-lo)
			for i := range k {
				items[i] = rawstore.Pending{ID: evs[lo+i].ID, Raw: raws[lo+i]}
			}
			j.Run(items[:k], vs[:k])
			for i := range k {
				if !vs[i].Valid {
					return fmt.Errorf("fixture event %x judged invalid: %s", evs[lo+i].ID, vs[i].Reason)
				}
			}
		}
		return nil
	})
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
