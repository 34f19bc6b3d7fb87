package rawstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// sightingModel is what the randomized archive holds: per id, the
// primary copy's created_at and bytes and the relays that served it.
type sightingModel struct {
	ts      map[[32]byte]uint64
	primary map[[32]byte][]byte
	served  map[[32]byte]map[uint32]bool
	first   map[[32]byte]uint32 // the relay that served it first
	relays  []uint32
	times   []uint64 // every created_at used, for ranges at the edges
}

func (m *sightingModel) count(relay uint32, since, until uint64, match func([]byte) bool) int64 {
	var n int64
	for id, ts := range m.ts {
		if ts >= since && ts <= until && m.served[id][relay] && (match == nil || match(m.primary[id])) {
			n++
		}
	}
	return n
}

// fillSightings ingests a randomized archive into s: relays serving
// overlapping sets, in batches that repeat ids (the same relay again, in
// one batch and across batches), differing copies, created_at ties, 0
// and the largest created_at a copy can have.
func fillSightings(t *testing.T, s *Store, seed uint64, n int) *sightingModel {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	m := &sightingModel{ts: map[[32]byte]uint64{}, primary: map[[32]byte][]byte{}, served: map[[32]byte]map[uint32]bool{}, first: map[[32]byte]uint32{}}
	for r := range 5 {
		idx, err := s.RelayIndex(fmt.Sprintf("wss://relay%d.example", r))
		if err != nil {
			t.Fatal(err)
		}
		m.relays = append(m.relays, idx)
	}
	times := []uint64{0, 1, 1000, 1001, 1002, 5000, math.MaxInt64 - 1, math.MaxInt64}
	m.times = times
	type ev struct {
		id  [32]byte
		raw []byte
	}
	evs := make([]ev, n)
	for i := range evs {
		evs[i].id = id(i)
		evs[i].raw = fmt.Appendf(nil, `{"id":"%s","created_at":%d,"kind":%d}`, hex.EncodeToString(evs[i].id[:]), times[rng.IntN(len(times))], i%3)
	}
	for range 60 {
		relay := m.relays[rng.IntN(len(m.relays))]
		b := &Batch{Relay: relay}
		for range 1 + rng.IntN(80) {
			e := evs[rng.IntN(n)]
			raw := e.raw
			if rng.IntN(10) == 0 { // a differing copy: bytes appended
				raw = append(raw[:len(raw)-1:len(raw)-1], fmt.Sprintf(`,"x":%d}`, rng.IntN(3))...)
			}
			b.Events = append(b.Events, Copy{ID: e.id, Raw: raw})
			if rng.IntN(4) == 0 { // the same copy again in the batch
				b.Events = append(b.Events, Copy{ID: e.id, Raw: raw})
			}
		}
		mustIngest(t, s, b)
		for _, c := range b.Events {
			if _, ok := m.primary[c.ID]; !ok {
				m.primary[c.ID] = c.Raw
				m.served[c.ID] = map[uint32]bool{}
				m.first[c.ID] = relay
				ts, _ := copyTime(&c)
				m.ts[c.ID] = ts
			}
			m.served[c.ID][relay] = true
		}
	}
	return m
}

// ranges is every range worth asking of m: whole, one instant (ties),
// either edge open, the top (OpenTop is until = MaxUint64), and random
// ones (5 under the race detector, which slows each question's scan
// tenfold; 20 without).
func (m *sightingModel) ranges(rng *rand.Rand) [][2]uint64 {
	out := [][2]uint64{{0, math.MaxUint64}, {0, 0}, {math.MaxUint64, math.MaxUint64}, {math.MaxInt64, math.MaxUint64}, {1001, 1001}, {2, 999}}
	for _, a := range m.times {
		out = append(out, [2]uint64{a, math.MaxUint64}, [2]uint64{0, a}, [2]uint64{a, a})
	}
	random := 20
	if raceEnabled {
		random = 5
	}
	for range random {
		a, b := m.times[rng.IntN(len(m.times))], m.times[rng.IntN(len(m.times))]
		out = append(out, [2]uint64{min(a, b), max(a, b)})
	}
	return out
}

var oddKind = func(raw []byte) bool { return bytes.Contains(raw, []byte(`"kind":1`)) }

// checkCounts compares CountServed by the index and by the scan with the
// model, for every relay, range and with and without a match.
func checkCounts(t *testing.T, s *Store, m *sightingModel, when string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 7))
	asked := 0
	for _, relay := range append(m.relays, 999) { // 999: no such relay
		for _, r := range m.ranges(rng) {
			for _, match := range []func([]byte) bool{nil, oddKind} {
				want := m.count(relay, r[0], r[1], match)
				idx, err := s.countSightings(relay, r[0], r[1], match)
				if err != nil {
					t.Fatal(err)
				}
				scan, err := s.countServedScan(relay, r[0], r[1], match)
				if err != nil {
					t.Fatal(err)
				}
				if idx != want || scan != want {
					t.Errorf("%s: relay %d [%d, %d] match %v: index %d, scan %d, want %d", when, relay, r[0], r[1], match != nil, idx, scan, want)
				}
				if want > 0 {
					asked++
				}
			}
		}
	}
	if asked < 50 {
		t.Errorf("%s: only %d questions had events: the archive proves little", when, asked)
	}
}

// With and without the sighting index, CountServed gives the model's
// counts on randomized archives, and IDsInRange its ids, wherever the
// first relay's T and H keys are: all in the journal, some folded, all
// folded. A new store uses the index.
func TestCountServedIndexMatchesScan(t *testing.T) {
	t.Parallel()
	for seed := range uint64(3) {
		for _, tc := range []struct {
			name   string
			foldAt int
			fold   bool // fold once filled
		}{{"in the journal", foldEvery, false}, {"partly folded", 50, false}, {"folded", foldEvery, true}} {
			s := openTest(t)
			if !s.SightingIndexReady() {
				t.Fatal("a new store's sighting index is not marked complete")
			}
			s.pend.foldAt = tc.foldAt
			m := fillSightings(t, s, seed, 400)
			if tc.fold {
				if err := s.fold(); err != nil {
					t.Fatal(err)
				}
			}
			if folded, pending := s.pend.n > 0, s.pendingCount() > 0; folded != (tc.fold || tc.foldAt < foldEvery) || pending == tc.fold {
				t.Fatalf("%s: %d folds, %d entries pending", tc.name, s.pend.n, s.pendingCount())
			}
			when := fmt.Sprintf("seed %d, %s", seed, tc.name)
			checkCounts(t, s, m, when)
			checkIDs(t, s, m, when)
			for _, relay := range m.relays {
				got, err := s.CountServed(relay, 0, math.MaxUint64, nil)
				if want := m.count(relay, 0, math.MaxUint64, nil); err != nil || got != want {
					t.Errorf("%s: CountServed(%d): %d, %v; want %d", when, relay, got, err, want)
				}
			}
		}
	}
}

// checkIDs compares the T keys of m's ranges with the model: each id
// once, in (created_at, id) order, its value the first relay.
func checkIDs(t *testing.T, s *Store, m *sightingModel, when string) {
	t.Helper()
	for _, r := range m.ranges(rand.New(rand.NewPCG(8, 8))) {
		var last []byte
		n := 0
		err := s.idEntries(r[0], r[1], func(ts uint64, id [32]byte, v []byte) error {
			k := idsKey(ts, &id)
			if bytes.Compare(k, last) <= 0 {
				return fmt.Errorf("%x after %x", k, last)
			}
			last = k
			if want, ok := m.ts[id]; !ok || want != ts || ts < r[0] || ts > r[1] {
				return fmt.Errorf("%x at %d: stored at %d (%v)", id[:4], ts, want, ok)
			}
			if len(v) != 4 || binary.BigEndian.Uint32(v) != m.first[id] {
				return fmt.Errorf("%x: T value %x, first relay %d", id[:4], v, m.first[id])
			}
			n++
			return nil
		})
		want := 0
		for _, ts := range m.ts {
			if ts >= r[0] && ts <= r[1] {
				want++
			}
		}
		if err != nil || n != want {
			t.Errorf("%s: ids in [%d, %d]: %d, %v; want %d", when, r[0], r[1], n, err, want)
		}
	}
}

// An archive from before the sighting index (no H keys, no mark) counts
// by the scan; reprocess --index builds the index, resuming after an
// interruption, to exactly the keys ingest would have written, from T
// values or, older still, from the event headers.
func TestBuildSightingIndex(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	m := fillSightings(t, s, 42, 600)
	want := hKeys(t, s)
	if len(want) < len(m.ts) {
		t.Fatalf("%d H keys for %d events", len(want), len(m.ts))
	}
	// Make it old: no H keys, no mark, and a third of the T values empty.
	b := s.db.NewBatch()
	_ = b.DeleteRange([]byte{prefixSighting}, []byte{prefixSighting + 1}, nil)
	_ = b.Delete(sightingMarkKey, nil)
	i := 0
	if err := s.idEntries(0, math.MaxUint64, func(ts uint64, id [32]byte, _ []byte) error {
		if i++; i%3 == 0 {
			return b.Set(idsKey(ts, &id), nil, nil)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	if s.SightingIndexReady() {
		t.Fatal("an archive with events but no mark counts as indexed")
	}
	for _, relay := range m.relays {
		got, err := s.CountServed(relay, 0, math.MaxUint64, oddKind)
		if want := m.count(relay, 0, math.MaxUint64, oddKind); err != nil || got != want {
			t.Errorf("old archive: CountServed(%d): %d, %v; want %d", relay, got, err, want)
		}
	}

	// Interrupted after its first batch: progress kept, no mark.
	defer func(n int) { indexBuildBatch = n }(indexBuildBatch)
	indexBuildBatch = 20 * sightingKeyLen
	ctx, cancel := context.WithCancel(context.Background())
	n, err := s.BuildSightingIndex(ctx, func(int64) { cancel() })
	if !errors.Is(err, context.Canceled) || n == 0 || s.SightingIndexReady() {
		t.Fatalf("interrupted build: %d events, %v, ready %v; want some, context.Canceled, not ready", n, err, s.SightingIndexReady())
	}
	if v, err := s.get(sightingBuildKey); err != nil || len(v) != 8+idLen {
		t.Fatalf("progress after an interrupted build: %x, %v", v, err)
	}
	s = reopenAt(t, s, dir)
	rest, err := s.BuildSightingIndex(context.Background(), nil)
	if err != nil || !s.SightingIndexReady() {
		t.Fatalf("resumed build: %v, ready %v", err, s.SightingIndexReady())
	}
	if n+rest < int64(len(m.ts)) || rest >= int64(len(m.ts)) {
		t.Errorf("built %d then %d events of %d: want the rest resumed, not all again", n, rest, len(m.ts))
	}
	if got := hKeys(t, s); !slices.Equal(got, want) {
		t.Errorf("built %d H keys, ingest wrote %d", len(got), len(want))
	}
	if v, _ := s.get(sightingBuildKey); v != nil {
		t.Errorf("build progress left after the build: %x", v)
	}
	s = reopenAt(t, s, dir)
	if !s.SightingIndexReady() {
		t.Error("the mark did not survive a reopen")
	}
	checkCounts(t, s, m, "after the build")
}

// reopenAt closes s and opens dir again.
func reopenAt(t *testing.T, s *Store, dir string) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hKeys(t *testing.T, s *Store) []string {
	t.Helper()
	if err := s.fold(); err != nil { // the first relay's H keys wait in the journal
		t.Fatal(err)
	}
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixSighting}, UpperBound: []byte{prefixSighting + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for it.First(); it.Valid(); it.Next() {
		out = append(out, string(it.Key()))
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The cost of counting a small relay follows the relay: in an archive of
// 20,000 events of another relay, counting a relay of 20 reads a few
// blocks with the index, where the scan reads every block of the range.
func TestCountServedCostFollowsRelay(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	<-s.idsDone // the id filter's build reads blocks too
	big, _ := s.RelayIndex("wss://big.example")
	small, _ := s.RelayIndex("wss://small.example")
	const n = 20000
	var bb, sb Batch
	bb.Relay, sb.Relay = big, small
	for i := range n {
		ev := id(i)
		c := Copy{ID: ev, Raw: fmt.Appendf(nil, `{"id":"%s","created_at":%d,"kind":1}`, hex.EncodeToString(ev[:]), 1_700_000_000+i)}
		bb.Events = append(bb.Events, c)
		if i%1000 == 0 { // 20 served by both, the small relay later
			sb.Events = append(sb.Events, c)
		}
	}
	mustIngest(t, s, &bb)
	mustIngest(t, s, &sb)
	if err := s.fold(); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	blocks := func(count func(uint32, uint64, uint64, func([]byte) bool) (int64, error)) int64 {
		t.Helper()
		before := s.db.Metrics().BlockCache
		got, err := count(small, 0, math.MaxUint64, nil)
		if err != nil || got != 20 {
			t.Fatalf("small relay: %d, %v; want 20", got, err)
		}
		after := s.db.Metrics().BlockCache
		return after.Hits + after.Misses - before.Hits - before.Misses
	}
	idx, scan := blocks(s.countSightings), blocks(s.countServedScan)
	t.Logf("block reads counting 20 events in %d: index %d, scan %d", n, idx, scan)
	if idx > 10 || scan < 10*idx {
		t.Errorf("block reads: index %d (want at most 10), scan %d (want 10 times more)", idx, scan)
	}
}

// A damaged primary replaced by another relay's copy keeps the relay
// that served it first (the T key names it) as a later sighting: the
// index and the scan both still count it, and Sources lists it; so
// whether its keys were folded or were still in the journal (then its
// T key is there twice, and the fold keeps the later).
func TestRepairKeepsFirstSource(t *testing.T) {
	for _, folded := range []bool{true, false} {
		s := openTest(t)
		a, _ := s.RelayIndex("wss://a")
		b, _ := s.RelayIndex("wss://b")
		ev := id(1)
		c := Copy{ID: ev, Raw: fmt.Appendf(nil, `{"id":"%s","created_at":1234,"kind":1}`, hex.EncodeToString(ev[:]))}
		mustIngest(t, s, &Batch{Relay: a, Events: []Copy{c}})
		if folded {
			// Damage the E value: a version byte no header has (in
			// E: out of the journal first).
			if err := s.fold(); err != nil {
				t.Fatal(err)
			}
			if err := s.db.Set(eventKey(&ev), []byte{0, 0, 0, 0, 0, 'x'}, pebble.Sync); err != nil {
				t.Fatal(err)
			}
		} else {
			garbleBody(t, s, ev)
		}
		if res := mustIngest(t, s, &Batch{Relay: b, Events: []Copy{c}}); res.Repaired != 1 {
			t.Fatalf("folded %v: re-ingest: %+v, want 1 repaired", folded, res)
		}
		for _, when := range []string{"after the repair", "folded after"} {
			if when == "folded after" {
				if err := s.fold(); err != nil {
					t.Fatal(err)
				}
			}
			src, err := s.Sources(ev)
			if err != nil || !slices.Equal(src, []uint32{b, a}) {
				t.Errorf("folded %v, %s: sources %v, %v; want [%d %d]", folded, when, src, err, b, a)
			}
			for _, relay := range []uint32{a, b} {
				idx, err1 := s.countSightings(relay, 1234, 1234, nil)
				scan, err2 := s.countServedScan(relay, 1234, 1234, nil)
				if idx != 1 || scan != 1 || err1 != nil || err2 != nil {
					t.Errorf("folded %v, %s: relay %d: index %d (%v), scan %d (%v); want 1", folded, when, relay, idx, err1, scan, err2)
				}
			}
			listed := 0
			if err := s.IDsInRange(0, math.MaxUint64, func(uint64, [32]byte) error { listed++; return nil }); err != nil || listed != 1 {
				t.Errorf("folded %v, %s: %d T keys, %v; want 1", folded, when, listed, err)
			}
		}
	}
}

// check reads the sighting keys: a key of the wrong length is damage,
// named as a sighting.
func TestCheckSightings(t *testing.T) {
	s := openTest(t)
	m := fillSightings(t, s, 3, 100)
	if rep, err := s.Check(); err != nil || rep.Damaged != 0 {
		t.Fatalf("check: %+v, %v; want nothing damaged", rep, err)
	}
	bad := binary.BigEndian.AppendUint32([]byte{prefixSighting}, m.relays[0])
	if err := s.db.Set(bad, nil, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Check()
	if err != nil || rep.Damaged != 1 || len(rep.DamagedIDs) != 0 || !strings.Contains(rep.First[0].Error(), "sighting") {
		t.Fatalf("check with a short H key: %+v, %v; want 1 damaged sighting, no id to fetch", rep, err)
	}
}
