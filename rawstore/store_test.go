package rawstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// reopen closes s and opens its directory again, closing it at the
// test's end.
func reopen(t *testing.T, s *Store, dir string) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func id(n int) [32]byte { return sha256.Sum256([]byte(strconv.Itoa(n))) }

func mustIngest(t *testing.T, s *Store, b *Batch) IngestResult {
	t.Helper()
	r, err := s.Ingest(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustStats(t *testing.T, s *Store) Stats {
	t.Helper()
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// drain verifies every pending copy with judge: by a scan when the store
// needs one (as lazyparse's Drain does), then from the queue until it is
// empty.
func drain(t *testing.T, s *Store, judge func(Pending) Verdict) {
	t.Helper()
	if s.NeedsScan() {
		if _, err := s.ScanPending(context.Background(), 100, func(items []Pending, vs []Verdict) error {
			for i := range items {
				vs[i] = judge(items[i])
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	drainQueue(t, s, judge)
}

// drainQueue verifies the queue with judge until it is empty, as the
// daemon's pool does.
func drainQueue(t *testing.T, s *Store, judge func(Pending) Verdict) {
	t.Helper()
	for {
		items, err := s.NextPending(0, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) == 0 {
			return
		}
		vs := make([]Verdict, len(items))
		for i := range items {
			if err := s.Load(&items[i]); err != nil {
				t.Fatal(err)
			}
			if items[i].Raw != nil {
				vs[i] = judge(items[i])
			}
		}
		if err := s.Apply(items, vs); err != nil {
			t.Fatal(err)
		}
	}
}

// judgeByContent treats raw bytes starting with "good" as valid.
func judgeByContent(p Pending) Verdict {
	if len(p.Raw) >= 4 && string(p.Raw[:4]) == "good" {
		return Verdict{Valid: true}
	}
	return Verdict{Reason: "id-mismatch"}
}

func TestIngestDedupAndProvenance(t *testing.T) {
	s := openTest(t)
	r1, _ := s.RelayIndex("wss://a")
	r2, _ := s.RelayIndex("wss://b")
	if r1 == r2 {
		t.Fatal("relays share an index")
	}
	res := mustIngest(t, s, &Batch{Relay: r1, Events: []Copy{{ID: id(1), Raw: []byte("good1")}, {ID: id(2), Raw: []byte("good2")}, {ID: id(1), Raw: []byte("good1")}}})
	if res.New != 2 || res.Duplicates != 1 {
		t.Fatalf("first batch: %+v", res)
	}
	res = mustIngest(t, s, &Batch{Relay: r2, Events: []Copy{{ID: id(1), Raw: []byte("good1")}}})
	if res.New != 0 || res.Duplicates != 1 {
		t.Fatalf("second relay: %+v", res)
	}
	src, err := s.Sources(id(1))
	if err != nil || len(src) != 2 || src[0] != r1 || src[1] != r2 {
		t.Fatalf("sources = %v, %v", src, err)
	}
	st := mustStats(t, s)
	if st.Events != 2 || st.Pending != 2 || st.Duplicates != 2 {
		t.Fatalf("stats %+v", st)
	}
	drain(t, s, judgeByContent)
	st = mustStats(t, s)
	if st.Valid != 2 || st.Pending != 0 || st.Invalid != 0 {
		t.Fatalf("after verify %+v", st)
	}
}

// A forged copy stored first must not hide the valid copy that comes
// later, and each bad copy is counted once however often it is resent.
func TestForgedFirstThenValid(t *testing.T) {
	s := openTest(t)
	r, _ := s.RelayIndex("wss://a")
	forged := Copy{ID: id(7), Raw: []byte("forged-7")}
	mustIngest(t, s, &Batch{Relay: r, Events: []Copy{forged}})
	drain(t, s, judgeByContent)
	if st := mustStats(t, s); st.Invalid != 1 || st.InvalidCopies["id-mismatch"] != 1 {
		t.Fatalf("after forged: %+v", st)
	}
	res := mustIngest(t, s, &Batch{Relay: r, Events: []Copy{{ID: id(7), Raw: []byte("good-7")}, {ID: id(7), Raw: []byte("good-7")}}})
	if res.Variants != 1 || res.Duplicates != 1 {
		t.Fatalf("valid copy: %+v", res)
	}
	drain(t, s, judgeByContent)
	// The forged copy again: a duplicate of a resolved copy, not recounted.
	if res := mustIngest(t, s, &Batch{Relay: r, Events: []Copy{forged}}); res.Variants != 0 || res.Duplicates != 1 {
		t.Fatalf("resend of forged copy: %+v", res)
	}
	drain(t, s, judgeByContent)
	st := mustStats(t, s)
	if st.Events != 1 || st.Valid != 1 || st.Invalid != 0 || st.Pending != 0 || st.InvalidCopies["id-mismatch"] != 1 {
		t.Fatalf("final stats %+v", st)
	}
	var got []string
	if err := s.ForEachValid(func(_ [32]byte, raw []byte) error { got = append(got, string(raw)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "good-7" {
		t.Fatalf("exported %q", got)
	}
	var quarantined []string
	_ = s.ForEachQuarantined(func(q Quarantined) error { quarantined = append(quarantined, q.Reason+"="+string(q.Raw)); return nil })
	if len(quarantined) != 1 || quarantined[0] != "id-mismatch=forged-7" {
		t.Fatalf("quarantine %q", quarantined)
	}
}

// Both copies arrive before the pool runs; the bad one is the primary.
func TestForgedAndValidInOneBatch(t *testing.T) {
	s := openTest(t)
	r, _ := s.RelayIndex("wss://a")
	mustIngest(t, s, &Batch{Relay: r, Events: []Copy{{ID: id(3), Raw: []byte("bad-3")}, {ID: id(3), Raw: []byte("good-3")}, {ID: id(4), Raw: []byte("good-4")}}})
	drain(t, s, judgeByContent)
	st := mustStats(t, s)
	if st.Events != 2 || st.Valid != 2 || st.Invalid != 0 || st.InvalidCopies["id-mismatch"] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMalformedAndReset(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	r, _ := s.RelayIndex("wss://a")
	mustIngest(t, s, &Batch{Relay: r,
		Events:    []Copy{{ID: id(1), Raw: []byte("good1")}, {ID: id(2), Raw: []byte("bad2")}},
		Malformed: []Malformed{{Raw: []byte(`["EVENT","s",{]`), Reason: "malformed"}},
	})
	// The same bad frame again (a page boundary re-sends it): counted once.
	mustIngest(t, s, &Batch{Relay: r, Malformed: []Malformed{{Raw: []byte(`["EVENT","s",{]`), Reason: "malformed"}, {Raw: []byte(`["EVENT","s",{]`), Reason: "malformed"}}})
	drain(t, s, judgeByContent)
	st := mustStats(t, s)
	if st.Valid != 1 || st.Invalid != 1 || st.InvalidCopies["malformed"] != 1 || st.InvalidCopies["id-mismatch"] != 1 {
		t.Fatalf("stats %+v", st)
	}
	n, err := s.ResetVerdicts()
	if err != nil || n != 2 {
		t.Fatalf("reset: %d pending, %v", n, err)
	}
	if st := mustStats(t, s); st.Pending != 2 || st.Valid != 0 || st.InvalidCopies["id-mismatch"] != 0 || st.InvalidCopies["malformed"] != 1 {
		t.Fatalf("after reset %+v", st)
	}
	// Nothing is queued: the need for a scan must survive a restart.
	if items, _ := s.NextPending(0, 10); len(items) != 0 {
		t.Fatalf("reset queued %d copies", len(items))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	if !s.NeedsScan() {
		t.Fatal("after a reset and a restart, NeedsScan is false")
	}
	drain(t, s, judgeByContent)
	if s.NeedsScan() {
		t.Fatal("NeedsScan after a completed scan")
	}
	if got := mustStats(t, s); got.Valid != 1 || got.Invalid != 1 || got.InvalidCopies["id-mismatch"] != 1 || got.Pending != 0 {
		t.Fatalf("after re-verify %+v", got)
	}
}

func TestShardStateAndReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := s.RelayIndex("wss://a")
	mustIngest(t, s, &Batch{Relay: r, Events: []Copy{{ID: id(1), Raw: []byte("good1")}}, Shards: map[string][]byte{"job": []byte("cursor-1")}, RelayRecord: []byte(`{"pages":1}`)})
	s = reopen(t, s, dir)
	if r2, _ := s.RelayIndex("wss://a"); r2 != r {
		t.Fatalf("relay index changed across reopen: %d -> %d", r, r2)
	}
	if v, _ := s.Shard(r, "job"); string(v) != "cursor-1" {
		t.Fatalf("shard state %q", v)
	}
	rel, _ := s.Relays()
	if len(rel) != 1 || rel[0].URL != "wss://a" || string(rel[0].Record) != `{"pages":1}` {
		t.Fatalf("relays %+v", rel)
	}
	// The queue sequence continues after reopen instead of overwriting.
	mustIngest(t, s, &Batch{Relay: r, Events: []Copy{{ID: id(2), Raw: []byte("good2")}}})
	items, _ := s.NextPending(0, 10)
	if len(items) != 2 || items[0].Seq >= items[1].Seq {
		t.Fatalf("queue after reopen: %+v", items)
	}
}

// A crash at any instant must never leave a cursor ahead of the events it
// passed: the cursor is in the same batch as its events.
func TestCrashNeverLosesEventsBehindCursor(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 20; round++ {
		fs := vfs.NewCrashableMem()
		s, err := Open(Options{Dir: "db", FS: fs, NoSync: round%2 == 1})
		if err != nil {
			t.Fatal(err)
		}
		r, _ := s.RelayIndex("wss://a")
		batches := 5 + rng.IntN(30)
		crashAt := rng.IntN(batches)
		var clone *vfs.MemFS
		for bn := 0; bn < batches; bn++ {
			var evs []Copy
			for j := 0; j < 50; j++ {
				evs = append(evs, Copy{ID: id(bn*1000 + j), Raw: []byte(fmt.Sprintf("good-%d-%d", bn, j))})
			}
			cur := binary.BigEndian.AppendUint64(nil, uint64(bn))
			mustIngest(t, s, &Batch{Relay: r, Events: evs, Shards: map[string][]byte{"j": cur}})
			if bn == crashAt {
				clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(100), RNG: rand.New(rand.NewPCG(uint64(round), 9))})
			}
		}
		s.Close()
		s2, err := Open(Options{Dir: "db", FS: clone})
		if err != nil {
			t.Fatalf("round %d: reopen after crash: %v", round, err)
		}
		cur, _ := s2.Shard(r, "j")
		if round%2 == 0 && cur == nil {
			t.Fatalf("round %d: synced cursor lost", round)
		}
		if cur != nil {
			upto := int(binary.BigEndian.Uint64(cur))
			if round%2 == 0 && upto != crashAt {
				t.Fatalf("round %d: synced cursor %d, want %d", round, upto, crashAt)
			}
			for bn := 0; bn <= upto; bn++ {
				for j := 0; j < 50; j++ {
					k := id(bn*1000 + j)
					if v, _ := s2.get(eventKey(&k)); v == nil {
						t.Fatalf("round %d: event %d/%d behind cursor %d lost", round, bn, j, upto)
					}
				}
			}
			st := mustStats(t, s2)
			if st.Events < int64(50*(upto+1)) || st.Events != st.Pending {
				t.Fatalf("round %d: counters %+v disagree with cursor %d", round, st, upto)
			}
		}
		s2.Close()
	}
}
