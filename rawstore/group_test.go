package rawstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// stagedPage is page bn of a crawl: 50 events of about 1 KB and the
// cursor that passes them.
func stagedPage(relay uint32, bn int) *Batch {
	var evs []Copy
	for j := range 50 {
		raw := fmt.Appendf(nil, "good-%d-%d-", bn, j)
		raw = append(raw, bytes.Repeat([]byte{'x'}, 1000)...)
		evs = append(evs, Copy{ID: id(bn*1000 + j), Raw: raw, CreatedAt: int64(1_700_000_000 - bn), Timed: true})
	}
	cur := binary.BigEndian.AppendUint64(nil, uint64(bn))
	return &Batch{Relay: relay, Events: evs, Shards: map[string][]byte{"j": cur}}
}

// Staged pages commit in groups past half a memtable, which Pebble takes
// as flushable batches. A crash at any instant loses a suffix of pages,
// cursors and events together: the archive holds exactly the pages up to
// its cursor, never a cursor ahead of its events; after Flush, on a
// synced store, every page.
func TestCrashLosesStagedPagesWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	flushables := 0
	for round := range 12 {
		fs := vfs.NewCrashableMem()
		var multi atomic.Int64
		el := pebble.EventListener{FlushBegin: func(fi pebble.FlushInfo) {
			// A flushable batch is flushed with the memtable before it.
			if fi.Input >= 2 {
				multi.Add(1)
			}
		}}
		opts := Options{Dir: "db", FS: fs, NoSync: round%2 == 1, MemTableSize: 512 << 10, GroupDelay: time.Hour, EventListener: &el}
		s, err := Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := s.RelayIndex("wss://a")
		pages := 10 + rng.IntN(30)
		crashAt := rng.IntN(pages + 1) // pages: after the final Flush
		var clone *vfs.MemFS
		var committed atomic.Int64
		for bn := range pages {
			b := stagedPage(r, bn)
			b.Committed = func() { committed.Add(1) }
			if _, err := s.Stage(b); err != nil {
				t.Fatal(err)
			}
			if bn == crashAt {
				clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(100), RNG: rand.New(rand.NewPCG(uint64(round), 9))})
			}
		}
		if committed.Load() == 0 {
			t.Fatalf("round %d: no page of %d committed before Flush, want full groups committed", round, pages)
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		if committed.Load() != int64(pages) {
			t.Fatalf("round %d: %d of %d pages committed after Flush", round, committed.Load(), pages)
		}
		if crashAt == pages {
			clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(100), RNG: rand.New(rand.NewPCG(uint64(round), 9))})
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		flushables += int(multi.Load())
		s2, err := Open(Options{Dir: "db", FS: clone})
		if err != nil {
			t.Fatalf("round %d: reopen after crash: %v", round, err)
		}
		cur, _ := s2.Shard(r, "j")
		upto := -1
		if cur != nil {
			upto = int(binary.BigEndian.Uint64(cur))
		}
		if round%2 == 0 && crashAt == pages && upto != pages-1 {
			t.Fatalf("round %d: cursor %d after a synced Flush, want %d", round, upto, pages-1)
		}
		for bn := 0; bn <= upto; bn++ {
			for j := range 50 {
				k := id(bn*1000 + j)
				if v, _ := s2.get(eventKey(&k)); v == nil {
					t.Fatalf("round %d: event %d/%d behind cursor %d lost", round, bn, j, upto)
				}
			}
		}
		// Whole pages only: no event past the cursor either.
		if st := mustStats(t, s2); st.Events != int64(50*(upto+1)) || st.Pending != st.Events {
			t.Fatalf("round %d: counters %+v disagree with cursor %d", round, st, upto)
		}
		s2.Close()
	}
	if flushables == 0 {
		t.Fatal("no group was flushed as a flushable batch")
	}
}

// A copy staged but not yet committed is found by the next batches: the
// same bytes are a duplicate, other bytes an alternate, and the counters
// count it once.
func TestStagedCopiesDedup(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), GroupDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, _ := s.RelayIndex("wss://a")
	r2, _ := s.RelayIndex("wss://b")
	first := Copy{ID: id(1), Raw: []byte("good1")}
	if res, err := s.Stage(&Batch{Relay: r, Events: []Copy{first}, Malformed: []Malformed{{Raw: []byte("bad"), Reason: "x"}}}); err != nil || res.New != 1 || res.Malformed != 1 {
		t.Fatalf("first stage: %+v %v", res, err)
	}
	if v, _ := s.get(eventKey(&first.ID)); v != nil {
		t.Fatal("a staged copy is visible before its group commits")
	}
	res, err := s.Stage(&Batch{Relay: r2, Events: []Copy{first, {ID: id(1), Raw: []byte("good1-other")}}, Malformed: []Malformed{{Raw: []byte("bad"), Reason: "x"}}})
	if err != nil || res.New != 0 || res.Duplicates != 1 || res.Variants != 1 || res.Malformed != 0 {
		t.Fatalf("second stage: %+v %v, want a duplicate and a variant of the staged copy", res, err)
	}
	// Ingest commits what was staged before it, with it.
	if res := mustIngest(t, s, &Batch{Relay: r, Events: []Copy{first, {ID: id(2), Raw: []byte("good2")}}}); res.New != 1 || res.Duplicates != 1 {
		t.Fatalf("ingest: %+v", res)
	}
	st := mustStats(t, s)
	if st.Events != 2 || st.Pending != 2 || st.Duplicates != 2 {
		t.Fatalf("stats %+v, want 2 events, 2 pending, 2 duplicates", st)
	}
	if src, _ := s.Sources(first.ID); len(src) != 2 {
		t.Fatalf("sources of the staged copy %v, want both relays", src)
	}
}

// A group that does not fill commits GroupDelay after its first batch,
// with nothing else to push it.
func TestStagedGroupCommitsAfterDelay(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), GroupDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, _ := s.RelayIndex("wss://a")
	done := make(chan struct{})
	c := Copy{ID: id(1), Raw: []byte("good1")}
	if _, err := s.Stage(&Batch{Relay: r, Events: []Copy{c}, Committed: func() { close(done) }}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the staged batch was not committed")
	}
	if v, _ := s.get(eventKey(&c.ID)); v == nil {
		t.Fatal("committed copy not in the store")
	}
}
