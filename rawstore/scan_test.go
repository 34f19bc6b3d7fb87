package rawstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// mixedArchive ingests, over two relays and several batches, primaries
// good and bad, alternates (a forged copy first, then the valid one, and
// the reverse), duplicates, and verifies part of it through the queue, so
// that a later drain meets every state a copy can be in.
func mixedArchive(t *testing.T, s *Store, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	r1, _ := s.RelayIndex("wss://a")
	r2, _ := s.RelayIndex("wss://b")
	for b := range 6 {
		var evs []Copy
		for range 150 {
			n := rng.IntN(500)
			body := "good" + fmt.Sprint(n)
			switch rng.IntN(10) {
			case 0:
				body = "forged" + fmt.Sprint(n) // a differing copy: alternate or bad primary
			case 1:
				body = "bad-only" + fmt.Sprint(n)
			}
			evs = append(evs, Copy{ID: id(n), Raw: []byte(body)})
		}
		relay := r1
		if b%2 == 1 {
			relay = r2
		}
		mustIngest(t, s, &Batch{Relay: relay, Events: evs})
		if b == 2 {
			drain(t, s, judgeByContent)
		}
	}
}

// archiveState is what a verified archive shows: its counters and its
// exported and quarantined copies.
func archiveState(t *testing.T, s *Store) (Stats, map[[32]byte]string, map[string]int) {
	t.Helper()
	valid := map[[32]byte]string{}
	if err := s.ForEachValid(func(id [32]byte, raw []byte) error { valid[id] = string(raw); return nil }); err != nil {
		t.Fatal(err)
	}
	quar := map[string]int{}
	if err := s.ForEachQuarantined(func(q Quarantined) error { quar[q.Reason+"="+string(q.Raw)]++; return nil }); err != nil {
		t.Fatal(err)
	}
	return mustStats(t, s), valid, quar
}

// Both ways through a backlog (key order, and the queue in batches read
// ahead in runs with verdicts applied behind the judge) end where the
// queue taken one copy at a time does, over every state a copy can be in.
func TestBacklogMatchesQueue(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		run  func(s *Store) (int, error)
		// requeued: what the run's own verdicts queue (a promoted
		// alternate's old primary) is left to the queue.
		requeued bool
	}{
		{"ScanPending", func(s *Store) (int, error) { return s.ScanPending(ctx, 7, judgeAll) }, true},
		{"DrainQueue", func(s *Store) (int, error) { return s.DrainQueue(ctx, 7, judgeAll) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(4) {
				want, got := openTest(t), openTest(t)
				mixedArchive(t, want, seed)
				mixedArchive(t, got, seed)
				drain(t, want, judgeByContent)
				pending := mustStats(t, got).Pending
				n, err := tc.run(got)
				if err != nil {
					t.Fatal(err)
				}
				if n < int(pending) {
					t.Fatalf("seed %d: judged %d copies, %d ids were pending", seed, n, pending)
				}
				if tc.requeued {
					drain(t, got, judgeByContent)
				}
				wantSt, wantValid, wantQuar := archiveState(t, want)
				gotSt, gotValid, gotQuar := archiveState(t, got)
				if fmt.Sprint(gotSt) != fmt.Sprint(wantSt) || !maps.Equal(gotValid, wantValid) || !maps.Equal(gotQuar, wantQuar) {
					t.Fatalf("seed %d: %s gives\n%+v, %d valid, quarantine %v\nthe queue one at a time gives\n%+v, %d valid, quarantine %v",
						seed, tc.name, gotSt, len(gotValid), gotQuar, wantSt, len(wantValid), wantQuar)
				}
				if gotSt.Pending != 0 || gotSt.Valid+gotSt.Invalid != gotSt.Events || len(gotValid) == 0 || len(gotQuar) == 0 {
					t.Fatalf("seed %d: archive not fully judged or trivial: %+v", seed, gotSt)
				}
				if items, _ := got.NextPending(0, 10); len(items) != 0 {
					t.Fatalf("seed %d: %d queue entries left", seed, len(items))
				}
			}
		})
	}
}

// judgeAll is a Judge applying judgeByContent.
func judgeAll(items []Pending, vs []Verdict) error {
	for i := range items {
		vs[i] = judgeByContent(items[i])
	}
	return nil
}

// An interrupted scan leaves verdicts whose queue entries are still there:
// after a restart, the queue must skip them, not count them twice.
func TestScanInterruptedThenQueue(t *testing.T) {
	dir := t.TempDir()
	want := openTest(t)
	mixedArchive(t, want, 9)
	drain(t, want, judgeByContent)
	wantSt, wantValid, wantQuar := archiveState(t, want)

	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	mixedArchive(t, s, 9)
	errStop := errors.New("stop")
	batches := 0
	_, err = s.ScanPending(context.Background(), 10, func(items []Pending, vs []Verdict) error {
		if batches++; batches == 4 {
			return errStop
		}
		return judgeAll(items, vs)
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("scan returned %v", err)
	}
	if st := mustStats(t, s); st.Pending == 0 || st.Valid == 0 {
		t.Fatalf("the interrupted scan judged all or nothing: %+v", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	drain(t, s, judgeByContent)
	gotSt, gotValid, gotQuar := archiveState(t, s)
	if fmt.Sprint(gotSt) != fmt.Sprint(wantSt) || !maps.Equal(gotValid, wantValid) || !maps.Equal(gotQuar, wantQuar) {
		t.Fatalf("after an interrupted scan and the queue:\n%+v, %d valid, quarantine %v\nwant\n%+v, %d valid, quarantine %v",
			gotSt, len(gotValid), gotQuar, wantSt, len(wantValid), wantQuar)
	}
	// A finished scan clears the mark: the queue no longer pays lookups.
	if _, err := s.ScanPending(context.Background(), 50, judgeAll); err != nil {
		t.Fatal(err)
	}
	if s.staleUpTo.Load() != 0 {
		t.Fatalf("stale mark %d after a finished scan", s.staleUpTo.Load())
	}
}

// Copies left out of the queue (LeaveUnqueued) are found by the scan,
// also after a crash: the mark that says they exist is durable with the
// first of them, and the verified archive is the one the queue makes.
func TestUnqueuedCopiesScannedAfterCrash(t *testing.T) {
	want := openTest(t)
	mixedArchive(t, want, 5)
	drain(t, want, judgeByContent)
	wantSt, wantValid, wantQuar := archiveState(t, want)

	fs := vfs.NewCrashableMem()
	s, err := Open(Options{Dir: "db", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	s.LeaveUnqueued()
	// Its drain after the third batch scans (and clears the mark); the
	// batches after it set the mark again.
	mixedArchive(t, s, 5)
	st := mustStats(t, s)
	queued, err := s.NextPending(0, int(st.Events)+1)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range queued {
		if p.Variant == nil {
			t.Fatalf("primary copy %x queued", p.ID[:4])
		}
	}
	if !s.NeedsScan() || st.Pending <= int64(len(queued)) {
		t.Fatalf("before the crash: NeedsScan %v, %d pending, %d queued; want a scan needed for more than the queue", s.NeedsScan(), st.Pending, len(queued))
	}
	clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(Options{Dir: "db", FS: clone}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.NeedsScan() {
		t.Fatal("after the crash the archive does not say it needs a scan")
	}
	drain(t, s, judgeByContent)
	gotSt, gotValid, gotQuar := archiveState(t, s)
	if fmt.Sprint(gotSt) != fmt.Sprint(wantSt) || !maps.Equal(gotValid, wantValid) || !maps.Equal(gotQuar, wantQuar) {
		t.Fatalf("unqueued, crashed and scanned:\n%+v, %d valid, quarantine %v\nqueued:\n%+v, %d valid, quarantine %v",
			gotSt, len(gotValid), gotQuar, wantSt, len(wantValid), wantQuar)
	}
	if gotSt.Pending != 0 || s.NeedsScan() {
		t.Fatalf("after the scan: %d pending, NeedsScan %v", gotSt.Pending, s.NeedsScan())
	}
}

// LoadAll reads what Load reads, copy for copy: primaries (in runs, the
// batch out of log order), alternates, and an id queued twice.
func TestLoadAllMatchesLoad(t *testing.T) {
	s := openTest(t)
	mixedArchive(t, s, 7)
	items, err := s.NextPending(0, 1<<20)
	if err != nil || len(items) < 100 {
		t.Fatalf("%d queued, %v", len(items), err)
	}
	alternates := 0
	for _, p := range items {
		if p.Variant != nil {
			alternates++
		}
	}
	if alternates == 0 {
		t.Fatal("no alternate queued: the test would not cover them")
	}
	// Shuffled, and one primary twice.
	batch := slices.Clone(items)
	rand.New(rand.NewPCG(7, 7)).Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
	for _, p := range items {
		if p.Variant == nil {
			batch = append(batch, p)
			break
		}
	}
	want := slices.Clone(batch)
	for i := range want {
		if err := s.Load(&want[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.LoadAll(batch); err != nil {
		t.Fatal(err)
	}
	for i := range batch {
		g, w := batch[i], want[i]
		if w.Raw == nil || string(g.Raw) != string(w.Raw) || g.Relay != w.Relay || g.Seen != w.Seen {
			t.Fatalf("copy %d (%x, variant %x): LoadAll %q relay %d seen %d, Load %q relay %d seen %d",
				i, g.ID[:4], g.Variant, g.Raw, g.Relay, g.Seen, w.Raw, w.Relay, w.Seen)
		}
	}
}
