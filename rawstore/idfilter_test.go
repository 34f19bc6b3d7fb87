package rawstore

import (
	"fmt"
	"testing"
)

// The filter never proves an added id new; it proves most others new
// while it holds up to its capacity; it proves nothing before its build
// is done or once it is far over capacity.
func TestIDFilter(t *testing.T) {
	const capacity = 1 << 16
	for _, tc := range []struct {
		name      string
		adds      int
		ready     bool
		maxFalse  float64 // most "maybe" answers for never-added ids
		minFalse  float64
		provesAny bool
	}{
		{"empty", 0, true, 0, 0, true},
		{"at capacity", capacity, true, 0.02, 0, true},
		{"not built yet", capacity / 2, false, 1, 1, false},
		{"far over capacity", 2*capacity + 1, true, 1, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newIDFilter(0)
			f.capacity = capacity
			f.blocks = uint64(capacity*idBitsPerID/(64*idBlockWords)) + 1
			f.words = f.words[:f.blocks*idBlockWords]
			f.ready.Store(tc.ready)
			for i := range tc.adds {
				ev := id(i)
				f.add(&ev)
			}
			for i := range min(tc.adds, 10000) {
				if ev := id(i); f.proveNew(&ev) {
					t.Fatalf("added id %d proven new", i)
				}
			}
			const probes = 20000
			maybe := 0
			for i := range probes {
				ev := id(-1 - i)
				if !f.proveNew(&ev) {
					maybe++
				}
			}
			rate := float64(maybe) / probes
			t.Logf("%d ids added: never-added ids answered maybe %.4f of the time", tc.adds, rate)
			if rate > tc.maxFalse || rate < tc.minFalse {
				t.Errorf("never-added ids answered maybe %.4f of the time, want [%.2f, %.2f]", rate, tc.minFalse, tc.maxFalse)
			}
			if tc.provesAny != (maybe < probes) {
				t.Errorf("proved some ids new: %v, want %v", maybe < probes, tc.provesAny)
			}
		})
	}
}

// A reopened archive's filter is built from the stored ids: the events
// ingested before are duplicates, not new primary copies, whichever way
// the lookup goes.
func TestIDFilterReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := s.RelayIndex("wss://a")
	batch := func(from, to int) *Batch {
		b := &Batch{Relay: r}
		for i := from; i < to; i++ {
			b.Events = append(b.Events, Copy{ID: id(i), Raw: []byte(fmt.Sprintf(`{"created_at":%d}`, 1000+i))})
		}
		return b
	}
	if res := mustIngest(t, s, batch(0, 500)); res.New != 500 {
		t.Fatalf("first ingest: %+v", res)
	}
	s = reopen(t, s, dir)
	<-s.idsDone
	if !s.ids.ready.Load() || s.ids.added.Load() != 500 {
		t.Fatalf("filter after reopen: ready %v, %d ids added, want ready with 500", s.ids.ready.Load(), s.ids.added.Load())
	}
	if res := mustIngest(t, s, batch(250, 750)); res.New != 250 || res.Duplicates != 250 {
		t.Fatalf("ingest after reopen: %+v, want 250 new and 250 duplicates", res)
	}
	if st := mustStats(t, s); st.Events != 750 {
		t.Fatalf("stored %d events, want 750", st.Events)
	}
}

// The filter's size follows the archive's at open, within its bounds.
func TestIDFilterSize(t *testing.T) {
	for _, tc := range []struct {
		stored             int64
		minBytes, maxBytes int
	}{
		{0, 2 << 20, 3 << 20},
		{1 << 20, 4 << 20, 6 << 20},
		{1 << 40, maxIDFilterBytes, maxIDFilterBytes + 64},
	} {
		f := newIDFilter(tc.stored)
		if n := len(f.words) * 8; n < tc.minBytes || n > tc.maxBytes {
			t.Errorf("%d ids stored: %d bytes, want [%d, %d]", tc.stored, n, tc.minBytes, tc.maxBytes)
		}
	}
}

// claim proves an id new once and adds it: the second claim, and every
// proveNew after, answer "maybe". A filter that cannot prove anything
// claims nothing and adds nothing.
func TestIDFilterClaim(t *testing.T) {
	f := newIDFilter(0)
	f.ready.Store(true)
	for i := range 1000 {
		ev := id(i)
		if !f.claim(&ev) {
			t.Fatalf("id %d: first claim on a near-empty filter not proven new", i)
		}
		if f.claim(&ev) || f.proveNew(&ev) {
			t.Fatalf("id %d: proven new again after its claim", i)
		}
	}
	if n := f.added.Load(); n != 1000 {
		t.Fatalf("%d adds counted for 1000 claims", n)
	}
	g := newIDFilter(0) // not built yet
	if ev := id(1); g.claim(&ev) || g.added.Load() != 0 {
		t.Fatal("an unbuilt filter claimed an id")
	}
}
