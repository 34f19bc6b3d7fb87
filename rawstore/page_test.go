package rawstore_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/filter"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/rawstore/storetest"
)

// A damaged primary replaced by a fresh copy keeps its index entries
// while the copy waits for its verdict: Query skips it (no verdict), and
// QueryIDs (a NEG-OPEN's set) must too, where it read index keys alone
// and listed it; once judged valid, both list it again.
func TestRepairedPrimaryWaitsForVerdict(t *testing.T) {
	t.Parallel()
	const n = 3000
	dir := filepath.Join(t.TempDir(), "archive")
	storetest.FillWith(t, rawstore.Options{Dir: dir}, "ws://127.0.0.1:1", n)
	storetest.Garble(t, dir, ".seg", 4096)
	s, err := rawstore.Open(rawstore.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rep, err := s.Check()
	if err != nil || len(rep.DamagedIDs) == 0 {
		t.Fatalf("check: %d damaged ids, %v; want some", len(rep.DamagedIDs), err)
	}
	// Before the repair: the damaged bodies are skipped and reported.
	all, _ := filter.Parse([]byte(`{}`))
	got := 0
	err = s.Query(all, func(*event.Event, []byte) error { got++; return nil })
	if de := (*rawstore.DamageError)(nil); !errors.As(err, &de) || got != n-len(rep.DamagedIDs) {
		t.Fatalf("query over damaged bodies: %d events, %v; want %d and a DamageError", got, err, n-len(rep.DamagedIDs))
	}

	index := map[[32]byte]int{}
	for i := range n {
		id, _ := storetest.Event(i)
		index[id] = i
	}
	b := &rawstore.Batch{}
	for _, id := range rep.DamagedIDs {
		_, raw := storetest.Event(index[id])
		b.Events = append(b.Events, rawstore.Copy{ID: id, Raw: raw})
	}
	if res, err := s.Ingest(b); err != nil || res.Repaired != len(rep.DamagedIDs) {
		t.Fatalf("re-ingest: %+v, %v; want %d repaired", res, err, len(rep.DamagedIDs))
	}

	var pub [32]byte
	pub[0] = 1 // storetest.Event's author
	for _, js := range []string{`{}`, `{"kinds":[1]}`, fmt.Sprintf(`{"authors":["%x"]}`, pub), `{"limit":2500}`} {
		fs, err := filter.Parse([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		var served, listed [][32]byte
		if err := s.Query(fs, func(e *event.Event, _ []byte) error { served = append(served, e.ID); return nil }); err != nil {
			t.Fatalf("%s: query: %v", js, err)
		}
		if err := s.QueryIDs(fs, func(_ int64, id [32]byte) error { listed = append(listed, id); return nil }); err != nil {
			t.Fatalf("%s: query ids: %v", js, err)
		}
		want := n - len(rep.DamagedIDs)
		if fs[0].Limit > 0 {
			want = min(want, fs[0].Limit)
		}
		if len(served) != want || !slices.Equal(listed, served) {
			t.Errorf("%s, %d ids waiting for a verdict: Query served %d (want %d), QueryIDs listed %d, the same: %v",
				js, len(rep.DamagedIDs), len(served), want, len(listed), slices.Equal(listed, served))
		}
		for _, id := range served {
			if slices.Contains(rep.DamagedIDs, id) {
				t.Errorf("%s: served %x before its new copy was judged", js, id[:4])
			}
		}
	}

	storetest.DrainQueue(t, s)
	var listed int
	if err := s.QueryIDs(all, func(int64, [32]byte) error { listed++; return nil }); err != nil || listed != n {
		t.Errorf("after the verdicts: QueryIDs listed %d, %v; want all %d", listed, err, n)
	}
}
