package rawstore

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

// An ingest whose lookup ran before other commits stored its ids must
// still take them for duplicates: from the ring of recent commits, or,
// when it fell further behind than the ring holds, by looking again.
func TestLookupBehindConcurrentCommits(t *testing.T) {
	for _, between := range []int{1, recentDepth - 1, recentDepth + 5} {
		t.Run(fmt.Sprintf("%d commits between", between), func(t *testing.T) {
			s := openTest(t)
			r, _ := s.RelayIndex("wss://a")
			late := &Batch{Relay: r, Events: []Copy{{ID: id(0), Raw: []byte("good0")}, {ID: id(1), Raw: []byte("good1")}, {ID: id(-1), Raw: []byte("good-1")}}}
			gen := s.recent.gen.Load()
			claimed := make([]bool, len(late.Events))
			known, err := s.lookup(late.Events, claimed)
			if err != nil || len(known) != 0 {
				t.Fatalf("lookup on an empty store: %v %v", known, err)
			}
			for i := range between { // ids 0 and 1 are stored by the first two
				mustIngest(t, s, &Batch{Relay: r, Events: []Copy{{ID: id(i), Raw: []byte(fmt.Sprintf("good%d", i))}}})
			}
			bodies, err := s.writeBodies(late, known)
			if err != nil {
				t.Fatal(err)
			}
			s.ingestMu.Lock()
			res, err := s.ingestLocked(late, known, claimed, gen, bodies)
			s.ingestMu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			if len(s.added) != 0 {
				t.Fatalf("the store kept %d copies of the batch after ingesting it", len(s.added))
			}
			wantNew := 1 // id(-1)
			if between == 1 {
				wantNew = 2 // id(1) was not stored in between
			}
			if res.New != wantNew || res.New+res.Duplicates != 3 {
				t.Fatalf("late batch: %+v, want %d new of 3", res, wantNew)
			}
			if st := mustStats(t, s); st.Events != int64(between+wantNew) || st.Pending != st.Events {
				t.Fatalf("stats %+v, want %d + %d events", st, between, wantNew)
			}
		})
	}
}

// Concurrent ingests of overlapping ids store each id once and queue it
// once, whatever the interleaving of their lookups and commits.
func TestConcurrentIngestsStoreEachIDOnce(t *testing.T) {
	s := openTest(t)
	const workers, batches, size, distinct = 8, 40, 50, 600
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := IngestResult{}
	for w := range workers {
		r, _ := s.RelayIndex(fmt.Sprintf("wss://%d", w))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				evs := make([]Copy, size)
				for i := range evs {
					n := (w*7 + b*size + i*13) % distinct
					evs[i] = Copy{ID: id(n), Raw: []byte(fmt.Sprintf("good%d", n))}
				}
				res, err := s.Ingest(&Batch{Relay: r, Events: evs})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				total.New += res.New
				total.Duplicates += res.Duplicates
				total.Variants += res.Variants
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if total.New != distinct || total.Variants != 0 || total.New+total.Duplicates != workers*batches*size {
		t.Fatalf("ingests reported %+v, want %d new of %d copies", total, distinct, workers*batches*size)
	}
	st := mustStats(t, s)
	if st.Events != distinct || st.Pending != distinct {
		t.Fatalf("stats %+v, want %d events pending", st, distinct)
	}
	queued, err := s.NextPending(0, 10*distinct)
	if err != nil || len(queued) != distinct {
		t.Fatalf("queue holds %d entries (%v), want %d", len(queued), err, distinct)
	}
}

// State runs under the ingest lock: its shard states and record are
// committed with the batch, and its error aborts the batch.
func TestBatchState(t *testing.T) {
	s := openTest(t)
	r, _ := s.RelayIndex("wss://a")
	mustIngest(t, s, &Batch{Relay: r, Events: []Copy{{ID: id(1), Raw: []byte("good1")}}, Shards: map[string][]byte{"a": []byte("static"), "b": []byte("static")},
		State: func() (map[string][]byte, []byte, error) {
			if s.ingestMu.TryLock() {
				t.Error("State ran without the ingest lock")
				s.ingestMu.Unlock()
			}
			return map[string][]byte{"b": []byte("from-state")}, []byte(`{"n":1}`), nil
		}})
	for job, want := range map[string]string{"a": "static", "b": "from-state"} {
		if v, _ := s.Shard(r, job); string(v) != want {
			t.Errorf("shard %s = %q, want %q", job, v, want)
		}
	}
	if rel, _ := s.Relays(); len(rel) != 1 || string(rel[0].Record) != `{"n":1}` {
		t.Errorf("relay record %+v", rel)
	}
	errStop := errors.New("stop")
	_, err := s.Ingest(&Batch{Relay: r, Events: []Copy{{ID: id(2), Raw: []byte("good2")}},
		State: func() (map[string][]byte, []byte, error) { return nil, nil, errStop }})
	if !errors.Is(err, errStop) {
		t.Fatalf("Ingest returned %v, want State's error", err)
	}
	if st := mustStats(t, s); st.Events != 1 {
		t.Fatalf("an aborted batch stored events: %+v", st)
	}
}
