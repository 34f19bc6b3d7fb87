package rawstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// runOf is a journal run of relay's entries (id n at created_at ts, or
// untimed at noTime), as addJournal makes it from a committed value.
func runOf(relay uint32, entries ...[2]uint64) []journalRun {
	var v []byte
	for _, e := range entries {
		id := id(int(e[0]))
		v = append(v, id[:]...)
		v = append(v, segValue(relay, 0, segLoc{})...)
		v = binary.BigEndian.AppendUint64(v, e[1])
	}
	return addJournal(newJournalIndex(0), nil, v, journalEntryLen)
}

// pendingIndex gives the runs' keys of a range in key order, each once
// (of a key in two runs, the later run's value), only the asked relay's
// H keys, never an untimed entry; a run with no timed entry is not kept.
func TestPendingIndex(t *testing.T) {
	const a, b = 7, 9
	runs := slices.Concat(
		runOf(a, [2]uint64{1, 10}, [2]uint64{2, 20}, [2]uint64{3, 30}, [2]uint64{4, noTime}),
		runOf(b, [2]uint64{5, 15}, [2]uint64{2, 20}), // 2 again: a repair by b
		runOf(a, [2]uint64{6, noTime}),
		runOf(a, [2]uint64{7, 5}, [2]uint64{8, 40}))
	if len(runs) != 3 || runs[0].lo != 10 || runs[0].hi != 30 || runs[1].relay != b {
		t.Fatalf("runs: %+v; want 3, the first over [10, 30], the second b's", runs)
	}
	type key struct {
		ts    uint64
		n     int
		first uint32
	}
	for _, tc := range []struct {
		relay        uint32
		since, until uint64
		want         []key
	}{
		{AnyRelay, 0, math.MaxUint64, []key{{5, 7, a}, {10, 1, a}, {15, 5, b}, {20, 2, b}, {30, 3, a}, {40, 8, a}}},
		{AnyRelay, 15, 30, []key{{15, 5, b}, {20, 2, b}, {30, 3, a}}},
		{AnyRelay, 31, 39, nil},
		{a, 0, math.MaxUint64, []key{{5, 7, 0}, {10, 1, 0}, {20, 2, 0}, {30, 3, 0}, {40, 8, 0}}},
		{b, 0, 19, []key{{15, 5, 0}}},
		{3, 0, math.MaxUint64, nil},
	} {
		var want []indexEntry
		for _, k := range tc.want {
			id := id(k.n)
			if tc.relay == AnyRelay {
				want = append(want, indexEntry{idsKey(k.ts, &id), binary.BigEndian.AppendUint32(nil, k.first)})
			} else {
				want = append(want, indexEntry{sightingKey(tc.relay, k.ts, &id), nil})
			}
		}
		got := pendingIndex(runs, tc.relay, tc.since, tc.until)
		if !slices.EqualFunc(got, want, func(x, y indexEntry) bool { return bytes.Equal(x.k, y.k) && bytes.Equal(x.v, y.v) }) {
			t.Errorf("relay %d [%d, %d]: %d keys %x; want %d %x", tc.relay, tc.since, tc.until, len(got), got, len(want), want)
		}
	}
}

// Readers of T and H keys racing ingests that fold every few batches
// see each stored id with a created_at once, in order, never fewer than a read before, and
// all of them at the end: an iterator made before a fold reads the runs
// of its moment, not the tables the fold ingests after it.
func TestIndexReadersRaceFolds(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	s.pend.foldAt = 60
	relay, _ := s.RelayIndex("wss://a")
	const n = 2000
	done := make(chan error, 1)
	go func() {
		for b := 0; b < n; b += 25 {
			var evs []Copy
			for i := b; i < b+25; i++ {
				evs = append(evs, Copy{ID: id(i), Raw: timedRaw(i)})
			}
			// Two without created_at: no T or H key.
			evs = append(evs, Copy{ID: id(n + b), Raw: segRaw(n + b)}, Copy{ID: id(n + b + 1), Raw: segRaw(n + b + 1)})
			if _, err := s.Ingest(&Batch{Relay: relay, Events: evs}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	read := func() (ids, back int, err error) {
		var last []byte
		if err := s.IDsInRange(0, math.MaxUint64, func(ts uint64, id [32]byte) error {
			k := idsKey(ts, &id)
			if bytes.Compare(k, last) <= 0 {
				return fmt.Errorf("T key %x after %x", k, last)
			}
			last = k
			ids++
			return nil
		}); err != nil {
			return 0, 0, err
		}
		err = s.ReadBack(t.Context(), relay, 0, math.MaxUint64, func(_ uint64, id [32]byte, ok bool) error {
			if !ok {
				return fmt.Errorf("%x read back damaged", id[:4])
			}
			back++
			return nil
		})
		return ids, back, err
	}
	reads, lastIDs, lastBack := 0, 0, 0
	for writing := true; writing; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			writing = false
		default:
		}
		ids, back, err := read()
		if err != nil || ids < lastIDs || back < lastBack {
			t.Fatalf("read %d: %d ids, %d read back, %v; before: %d and %d", reads, ids, back, err, lastIDs, lastBack)
		}
		lastIDs, lastBack = ids, back
		reads++
	}
	if lastIDs != n || lastBack != n {
		t.Fatalf("after the ingests: %d ids, %d read back; want %d", lastIDs, lastBack, n)
	}
	t.Logf("%d reads, %d folds", reads, s.pend.n)
}

// journalEntries returns the store's journal keys and values.
func journalEntries(t *testing.T, s *Store) (keys, vals [][]byte) {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixJournal}, UpperBound: []byte{prefixJournal + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		keys = append(keys, slices.Clone(it.Key()))
		vals = append(vals, slices.Clone(it.Value()))
	}
	return keys, vals
}

// A journal of the format before T and H keys joined it (J|seq, E
// entries only, the T and H keys written beside it), left by a crash,
// is read by a read-only open and folded by a writable one: every event
// looked up, listed and read back.
func TestJournalFormat0(t *testing.T) {
	t.Parallel()
	s, fs := openCrashable(t)
	relay, _ := s.RelayIndex("wss://a")
	const n = 120
	ingestTimed(t, s, relay, n, 40)
	// Rewrite each journal key as the old format would have written it.
	keys, vals := journalEntries(t, s)
	if len(keys) != 3 {
		t.Fatalf("%d journal keys, want 3", len(keys))
	}
	b := s.db.NewBatch()
	for i, k := range keys {
		var old []byte
		for e := vals[i]; len(e) > 0; e = e[journalEntryLen:] {
			id := [32]byte(e[:idLen])
			old = append(old, e[:journalEntryLenE]...)
			indexID(b, &id, entryTime(e), relay)
			_ = b.Set(sightingKey(relay, entryTime(e), &id), nil, nil)
		}
		_ = b.Delete(k, nil)
		_ = b.Set(k[:9], old, nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	clone := crash(t, s, fs)
	for _, ro := range []bool{true, false} {
		s, err := Open(Options{Dir: "db", FS: clone, ReadOnly: ro})
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("read-only %v", ro)
		if s.pend.runs != nil || journalKeys(t, s) != map[bool]int{true: 3, false: 0}[ro] {
			t.Fatalf("%s: %d runs, %d journal keys", what, len(s.pend.runs), journalKeys(t, s))
		}
		listed := 0
		if err := s.IDsInRange(0, math.MaxUint64, func(uint64, [32]byte) error { listed++; return nil }); err != nil || listed != n {
			t.Fatalf("%s: %d listed, %v; want %d", what, listed, err, n)
		}
		if back := readBackIntact(t, s, relay); back != n {
			t.Fatalf("%s: %d read back; want %d", what, back, n)
		}
		for i := range n {
			if h, err := s.Lookup(id(i)); err != nil || !bytes.Equal(h.Primary, timedRaw(i)) {
				t.Fatalf("%s: event %d: %q, %v", what, i, h.Primary, err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A journal value that cannot be read takes its batch's E, T and H keys
// with it while the batch's shard cursors say the range was fetched: a
// writable open notes the damage and drops that relay's cursors, so its
// crawl pages the range again, and keeps every other relay's.
func TestDamagedJournalDropsCursors(t *testing.T) {
	t.Parallel()
	s, fs := openCrashable(t)
	a, _ := s.RelayIndex("wss://a")
	b, _ := s.RelayIndex("wss://b")
	for r, relay := range []uint32{a, b} {
		var evs []Copy
		for i := r * 50; i < r*50+50; i++ {
			evs = append(evs, Copy{ID: id(i), Raw: timedRaw(i)})
		}
		mustIngest(t, s, &Batch{Relay: relay, Events: evs, Shards: map[string][]byte{"job/1": []byte("cursor")}})
	}
	keys, _ := journalEntries(t, s)
	if len(keys) != 2 || binary.BigEndian.Uint32(keys[0][10:]) != a {
		t.Fatalf("journal keys %x; want a's, then b's", keys)
	}
	if err := s.db.Set(keys[0], []byte("torn"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	clone := crash(t, s, fs)
	s, err := Open(Options{Dir: "db", FS: clone})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var de *DamageError
	if err := s.Damage(); !errors.As(err, &de) || de.N != 1 || !strings.Contains(err.Error(), fmt.Sprintf("journal entry 1 of relay %d", a)) {
		t.Fatalf("damage after the open: %v; want the journal key named", err)
	}
	if c, err := s.Shard(a, "job/1"); c != nil || err != nil {
		t.Errorf("a's cursor after its journal key was lost: %q, %v; want none", c, err)
	}
	if c, err := s.Shard(b, "job/1"); string(c) != "cursor" || err != nil {
		t.Errorf("b's cursor: %q, %v; want it kept", c, err)
	}
	for i := 50; i < 100; i++ {
		if h, err := s.Lookup(id(i)); err != nil || !bytes.Equal(h.Primary, timedRaw(i)) {
			t.Fatalf("b's event %d: %q, %v", i, h.Primary, err)
		}
	}
	if n, err := s.CountServed(b, 0, math.MaxUint64, nil); n != 50 || err != nil {
		t.Errorf("b's events counted: %d, %v; want 50", n, err)
	}
	// a's crawl fetches them again.
	var evs []Copy
	for i := range 50 {
		evs = append(evs, Copy{ID: id(i), Raw: timedRaw(i)})
	}
	if res := mustIngest(t, s, &Batch{Relay: a, Events: evs}); res.New != 50 {
		t.Fatalf("a's events again: %+v; want 50 new", res)
	}
	if n, err := s.CountServed(a, 0, math.MaxUint64, nil); n != 50 || err != nil {
		t.Errorf("a's events counted: %d, %v; want 50", n, err)
	}
}
