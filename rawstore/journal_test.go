package rawstore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// timedRaw is event i's body with a created_at, so that it has T and H
// keys.
func timedRaw(i int) []byte {
	ev := id(i)
	return fmt.Appendf(nil, `{"id":"%s","created_at":%d,"kind":1,"content":"%s"}`, hex.EncodeToString(ev[:]), 1700000000+i, strings.Repeat("x", i%300))
}

// journalKeys counts the journal keys the store holds.
func journalKeys(t *testing.T, s *Store) int {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixJournal}, UpperBound: []byte{prefixJournal + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	return n
}

// ingestTimed ingests timedRaw(0..n-1) from relay, per to a batch.
func ingestTimed(t *testing.T, s *Store, relay uint32, n, per int) {
	t.Helper()
	for b := 0; b < n; b += per {
		var evs []Copy
		for i := b; i < min(b+per, n); i++ {
			evs = append(evs, Copy{ID: id(i), Raw: timedRaw(i)})
		}
		mustIngest(t, s, &Batch{Relay: relay, Events: evs})
	}
}

// openCrashable opens a store in a file system that can be crash-cloned.
func openCrashable(t *testing.T) (*Store, *vfs.MemFS) {
	t.Helper()
	fs := vfs.NewCrashableMem()
	s, err := Open(Options{Dir: "db", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	return s, fs
}

// crash returns what a crash of s would leave of fs (what was synced),
// and closes s.
func crash(t *testing.T, s *Store, fs *vfs.MemFS) *vfs.MemFS {
	t.Helper()
	clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return clone
}

// readBackIntact counts the copies of relay that ReadBack reads intact.
func readBackIntact(t *testing.T, s *Store, relay uint32) int {
	t.Helper()
	n := 0
	if err := s.ReadBack(t.Context(), relay, 0, ^uint64(0), func(_ uint64, _ [32]byte, ok bool) error {
		if ok {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// A crash with E keys still in the journal: a read-only open reads them
// (lookups, check's walk of E, the crawl's read-back) without writing, a
// writable open folds them into a table and leaves no journal key, and
// both read every event back byte for byte.
func TestJournalAfterCrash(t *testing.T) {
	t.Parallel()
	s, fs := openCrashable(t)
	relay, err := s.RelayIndex("wss://a")
	if err != nil {
		t.Fatal(err)
	}
	s.pend.foldAt = 250 // one fold on the way; the last batches stay in the journal
	const n = 600
	ingestTimed(t, s, relay, n, 100)
	if s.pend.n != 1 || s.pendingCount() != 300 || journalKeys(t, s) != 3 {
		t.Fatalf("before the crash: %d folds, %d entries pending in %d journal keys; want 1, 300, 3", s.pend.n, s.pendingCount(), journalKeys(t, s))
	}
	clone := crash(t, s, fs)

	readAll := func(s *Store, what string) {
		t.Helper()
		for i := range n {
			h, err := s.Lookup(id(i))
			if err != nil || !bytes.Equal(h.Primary, timedRaw(i)) {
				t.Fatalf("%s: event %d: %q, %v", what, i, h.Primary, err)
			}
		}
		rep, err := s.Check()
		if err != nil || rep.Events != n || rep.Damaged != 0 {
			t.Fatalf("%s: check: %+v, %v; want %d events, no damage", what, rep, err, n)
		}
		if back := readBackIntact(t, s, relay); back != n {
			t.Fatalf("%s: read back %d; want %d", what, back, n)
		}
	}
	ro, err := Open(Options{Dir: "db", FS: clone, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if ro.pendingCount() != 300 {
		t.Fatalf("read-only: %d journal entries, want 300", ro.pendingCount())
	}
	readAll(ro, "read-only")
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	rw, err := Open(Options{Dir: "db", FS: clone})
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if k := journalKeys(t, rw); k != 0 || rw.pendingCount() != 0 {
		t.Fatalf("writable open: %d journal keys, %d entries pending; want none", k, rw.pendingCount())
	}
	readAll(rw, "writable")
}

// An E key written directly (an alternate promoted over a primary still
// in the journal) is not undone by the fold that follows: the table a
// fold ingests is newer than the memtable.
func TestJournalPromotionSurvivesFold(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s.RelayIndex("wss://a")
	b, _ := s.RelayIndex("wss://b")
	forged, good := []byte("bad-copy-1"), []byte("good-copy-1")
	mustIngest(t, s, &Batch{Relay: a, Events: []Copy{{ID: id(1), Raw: forged}}})
	mustIngest(t, s, &Batch{Relay: b, Events: []Copy{{ID: id(1), Raw: good}}})
	if s.pendingCount() != 1 {
		t.Fatalf("%d entries in the journal, want the forged primary's", s.pendingCount())
	}
	// From the queue, as the daemon's pool does (a scan would fold
	// before it starts).
	drainQueue(t, s, judgeByContent)
	check := func(s *Store, what string) {
		t.Helper()
		h, err := s.Lookup(id(1))
		if err != nil || !bytes.Equal(h.Primary, good) || h.Verdict != "valid" {
			t.Fatalf("%s: primary %q (%s), %v; want %q, valid", what, h.Primary, h.Verdict, err, good)
		}
	}
	check(s, "promoted")
	if err := s.fold(); err != nil {
		t.Fatal(err)
	}
	check(s, "folded")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(Options{Dir: dir, ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s, "reopened")
}

// Lookups racing folds: a lookup's iterator made before a fold must still
// find what the fold moved (it reads the journal map of its iterator's
// moment), or an id stored by an earlier batch is taken for new and
// stored and counted twice.
func TestJournalLookupsRaceFolds(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	s.pend.foldAt = 30
	r1, _ := s.RelayIndex("wss://a")
	r2, _ := s.RelayIndex("wss://b")
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 3000
	done := make(chan error, 2)
	for _, relay := range []uint32{r1, r2} {
		perm := rng.Perm(n)
		go func() {
			for b := 0; b < n; b += 25 {
				var evs []Copy
				// Each page starts with the last few of the page before,
				// as a relay's boundary second: ids this relay's own
				// earlier commit stored, which only the lookup can find.
				for _, i := range perm[max(b-5, 0) : b+25] {
					evs = append(evs, Copy{ID: id(i), Raw: segRaw(i)})
				}
				if _, err := s.Ingest(&Batch{Relay: relay, Events: evs}); err != nil {
					done <- fmt.Errorf("relay %d: %w", relay, err)
					return
				}
			}
			done <- nil
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if st := mustStats(t, s); st.Events != n || st.Duplicates != n+2*(n-25)/25*5 {
		t.Fatalf("%d events, %d duplicates after two relays served the same %d; %d folds", st.Events, st.Duplicates, n, s.pend.n)
	}
	t.Logf("%d folds", s.pend.n)
}

// A fold's entries come out in id order, all of them, however the ids
// crowd: random ids, ids sharing their first 2 or 8 bytes (forged ids
// can), a single id, none.
func TestSortedEntries(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	randomID := func(prefix int, b byte) (id [32]byte) {
		for i := range id {
			id[i] = byte(rng.Uint32())
		}
		for i := range prefix {
			id[i] = b
		}
		return id
	}
	for _, tc := range []struct {
		name   string
		n      int
		prefix int  // leading bytes every id shares
		b      byte // their value
	}{{"none", 0, 0, 0}, {"one", 1, 0, 0}, {"random", 5000, 0, 0}, {"bucket shared", 3000, 2, 0xab},
		{"first 8 bytes shared", 3000, 8, 0xab}, {"first bucket", 50, 2, 0}, {"last bucket", 50, 2, 0xff}} {
		m := newJournalIndex(0)
		for range tc.n {
			id := randomID(tc.prefix, tc.b)
			var v [eventLenV3]byte
			copy(v[:], id[:])
			m.put(&id, &v)
		}
		got := sortedEntries(m)
		if len(got) != m.len() {
			t.Fatalf("%s: %d entries of %d", tc.name, len(got), m.len())
		}
		for i, e := range got {
			if v, ok := m.get(&e.id); !ok || v != e.v || e.hi != binary.BigEndian.Uint64(e.id[:8]) {
				t.Fatalf("%s: entry %d is not the map's", tc.name, i)
			}
			if i > 0 && bytes.Compare(got[i-1].id[:], e.id[:]) >= 0 {
				t.Fatalf("%s: entries %d and %d out of order", tc.name, i-1, i)
			}
		}
	}
}
