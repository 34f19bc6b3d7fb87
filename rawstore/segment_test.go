package rawstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// segRaw is the body of event n of the crash test: sizes vary so that
// records straddle the small test segments' ends.
func segRaw(n int) []byte {
	return []byte(fmt.Sprintf("good-%d-%s", n, strings.Repeat("x", 100+(n*7919)%2000)))
}

// A crash at any instant (a clone of the file system keeps what was
// synced and a random part of the rest), while two relays ingest at once
// into small segments that roll every few batches, written in whole
// blocks as direct writes are or not: every event behind
// each relay's cursor reads back byte for byte, check finds no damage, a
// read-only open changes no file, and a writable open appends after the
// committed tail (the garbage a crash left behind included) so that the
// archive goes on taking events.
func TestCrashSegmentsKeepEventsBehindCursor(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	const relays, batches, size = 2, 40, 20
	for round := range 12 {
		fs := vfs.NewCrashableMem()
		s, err := Open(Options{Dir: "db", FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		s.segs.rollSize = 32 << 10
		s.segs.alignAlways = round%2 == 0 // the direct path's blocks, on a file system without O_DIRECT
		if round%3 != 0 {
			// Folds of the E key journal between batches (journal.go),
			// crashed into too.
			s.pend.foldAt = 20 + 40*(round%3)
		}
		var rs [relays]uint32
		for r := range rs {
			if rs[r], err = s.RelayIndex(fmt.Sprintf("wss://%d", r)); err != nil {
				t.Fatal(err)
			}
		}
		n0 := func(r, bn int) int { return (r*batches + bn) * size } // batch bn's first event
		committed := make(chan struct{}, relays*batches)
		var wg sync.WaitGroup
		for r := range rs {
			wg.Go(func() {
				for bn := range batches {
					var evs []Copy
					for j := range size {
						n := (r*batches+bn)*size + j
						evs = append(evs, Copy{ID: id(n), Raw: segRaw(n)})
					}
					if bn%3 == 1 { // a batch that repeats the one before
						evs = append(evs, Copy{ID: id(n0(r, bn-1)), Raw: segRaw(n0(r, bn-1))})
					}
					cur := binary.BigEndian.AppendUint64(nil, uint64(bn))
					if _, err := s.Ingest(&Batch{Relay: rs[r], Events: evs, Shards: map[string][]byte{"j": cur}}); err != nil {
						t.Error(err)
						return
					}
					committed <- struct{}{}
				}
			})
		}
		for range 1 + rng.IntN(relays*batches-1) {
			<-committed
		}
		clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rand.New(rand.NewPCG(uint64(round), 9))})
		wg.Wait()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		before := files(t, clone)
		ro, err := Open(Options{Dir: "db", FS: clone, ReadOnly: true})
		if err != nil {
			t.Fatalf("round %d: read-only open after crash: %v", round, err)
		}
		behind := checkBehindCursors(t, ro, rs[:], batches, size)
		if err := ro.Close(); err != nil {
			t.Fatal(err)
		}
		if after := files(t, clone); !slices.Equal(before, after) {
			t.Fatalf("round %d: a read-only open changed the files:\n%v\n%v", round, before, after)
		}

		s2, err := Open(Options{Dir: "db", FS: clone})
		if err != nil {
			t.Fatalf("round %d: reopen after crash: %v", round, err)
		}
		s2.segs.rollSize = 32 << 10
		s2.segs.alignAlways = round%4 < 2
		if got := checkBehindCursors(t, s2, rs[:], batches, size); got != behind {
			t.Fatalf("round %d: %d events behind the cursors read-only, %d writable", round, behind, got)
		}
		// Everything again, after the garbage: what was lost is stored
		// anew, the rest are duplicates.
		for r := range rs {
			for bn := range batches {
				var evs []Copy
				for j := range size {
					n := (r*batches+bn)*size + j
					evs = append(evs, Copy{ID: id(n), Raw: segRaw(n)})
				}
				cur := binary.BigEndian.AppendUint64(nil, uint64(bn))
				mustIngest(t, s2, &Batch{Relay: rs[r], Events: evs, Shards: map[string][]byte{"j": cur}})
			}
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
		s3, err := Open(Options{Dir: "db", FS: clone, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := checkBehindCursors(t, s3, rs[:], batches, size); got != relays*batches*size {
			t.Fatalf("round %d: %d events readable after crawling again, want %d", round, got, relays*batches*size)
		}
		if st := mustStats(t, s3); st.Events != relays*batches*size {
			t.Fatalf("round %d: %d events counted, want %d", round, st.Events, relays*batches*size)
		}
		t.Logf("round %d: %d events behind the cursors at the crash; %d segments after; %d folds", round, behind, len(files(t, clone)), s.pend.n)
		s3.Close()
	}
}

// checkBehindCursors fails the test unless every event up to each relay's
// cursor reads back as stored and check finds nothing damaged; it returns
// how many events that is. It reads each event as Lookup reads its
// primary copy (the event record, then its bytes in the segment log), but
// through one Pebble iterator: Lookup opens five, and under -race Pebble
// records a stack for each, which made Lookup most of this test's time.
func checkBehindCursors(t *testing.T, s *Store, rs []uint32, batches, size int) int {
	t.Helper()
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEvent}, UpperBound: prefixEnd([]byte{prefixEvent})})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	primary := func(id [32]byte) (raw []byte, err error) {
		key := eventKey(&id)
		if !it.SeekGE(key) || !bytes.Equal(it.Key(), key) {
			return nil, it.Error()
		}
		_, raw, err = s.decodeEvent(key, it.Value())
		return raw, err
	}
	total := 0
	for r, relay := range rs {
		cur, err := s.Shard(relay, "j")
		if err != nil {
			t.Fatal(err)
		}
		if cur == nil {
			continue
		}
		upto := int(binary.BigEndian.Uint64(cur))
		for bn := 0; bn <= upto; bn++ {
			for j := range size {
				n := (r*batches+bn)*size + j
				raw, err := primary(id(n))
				if err != nil || !bytes.Equal(raw, segRaw(n)) {
					t.Fatalf("event %d of batch %d of relay %d, behind cursor %d: %d bytes, %v", n, bn, r, upto, len(raw), err)
				}
				total++
			}
		}
	}
	rep, err := s.Check()
	if err != nil || rep.Damaged != 0 {
		t.Fatalf("check: %d damaged (%v), %v", rep.Damaged, rep.First, err)
	}
	return total
}

// files lists the archive's segment files and their sizes.
func files(t *testing.T, fs vfs.FS) []string {
	t.Helper()
	names, err := fs.List("db/" + segDirName)
	if err != nil {
		return nil
	}
	slices.Sort(names)
	var out []string
	for _, n := range names {
		fi, err := fs.Stat("db/" + segDirName + "/" + n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s:%d", n, fi.Size()))
	}
	return out
}

// On a real disk the segment writer bypasses the page cache, in whole
// blocks: bodies of many sizes over many batches, segment rolls, and a
// reopen that goes on inside the tail's block, all read back byte for
// byte, and every segment file ends on a block boundary.
func TestDirectSegments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	probe, err := vfs.Default.Create(filepath.Join(dir, "probe"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if err := setDirect(probe, true); err != nil {
		t.Skipf("the file system under %s refuses O_DIRECT: %v", dir, err)
	}
	probe.Close()
	db := filepath.Join(dir, "db")
	const batches, size = 40, 20
	var tail segPos
	for round := range 2 {
		s, err := Open(Options{Dir: db})
		if err != nil {
			t.Fatal(err)
		}
		s.segs.rollSize = 64 << 10 // rolls every few batches
		if round == 1 {
			s.segs.rollSize = segRollSize // the tail's segment has room
		}
		rel, err := s.RelayIndex("wss://direct")
		if err != nil {
			t.Fatal(err)
		}
		for bn := round * batches / 2; bn < (round+1)*batches/2; bn++ {
			var evs []Copy
			for j := range size {
				evs = append(evs, Copy{ID: id(bn*size + j), Raw: segRaw(bn*size + j)})
			}
			if bn%3 == 1 { // a duplicate, compared with the bytes written before
				evs = append(evs, Copy{ID: id((bn - 1) * size), Raw: segRaw((bn - 1) * size)})
			}
			cur := binary.BigEndian.AppendUint64(nil, uint64(bn))
			mustIngest(t, s, &Batch{Relay: rel, Events: evs, Shards: map[string][]byte{"j": cur}})
			if !s.segs.direct {
				t.Fatalf("batch %d: segment writes are not direct", bn)
			}
			if round == 1 && bn == batches/2 && (s.segs.w.num != tail.seg || tail.off%dioAlign == 0) {
				t.Fatalf("the reopened store appends to segment %d, the tail is %+v: not inside the tail's block", s.segs.w.num, tail)
			}
		}
		tail = s.segs.tail
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(Options{Dir: db, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rel, _ := s.RelayIndex("wss://direct")
	if got := checkBehindCursors(t, s, []uint32{rel}, batches, size); got != batches*size {
		t.Fatalf("%d events read back, want %d", got, batches*size)
	}
	segs, err := filepath.Glob(filepath.Join(db, segDirName, "*"+segExt))
	if err != nil || len(segs) < 3 {
		t.Fatalf("segments %v (%v): the test meant to roll", segs, err)
	}
	for _, name := range segs {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size()%dioAlign != 0 {
			t.Errorf("%s: %d bytes, not whole blocks", name, fi.Size())
		}
	}
}

// A page of copies of stored ids reads their bodies in runs: one damaged
// record amid the run is repaired by its fresh copy, its neighbours are
// duplicates.
func TestLookupReadsRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rel, err := s.RelayIndex("wss://runs")
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	batch := func() *Batch {
		b := &Batch{Relay: rel}
		for i := range n {
			b.Events = append(b.Events, Copy{ID: id(i), Raw: segRaw(i)})
		}
		return b
	}
	if res := mustIngest(t, s, batch()); res.New != n {
		t.Fatalf("first ingest: %+v", res)
	}
	// Garble one body in the middle of the log.
	victim := id(n / 2)
	garbleBody(t, s, victim)
	res := mustIngest(t, s, batch())
	if res.Repaired != 1 || res.Duplicates != n-1 || res.New != 0 {
		t.Fatalf("second ingest: %+v; want 1 repaired, %d duplicates", res, n-1)
	}
	if got, err := s.segs.read(eventKey(&victim), segLocOf(mustGet(t, s, eventKey(&victim)))); err != nil || !bytes.Equal(got, segRaw(n/2)) {
		t.Fatalf("the repaired copy reads %q, %v", got, err)
	}
}

// syncGate counts the syncs of segment files and holds each until the
// test lets it go.
type syncGate struct {
	n    atomic.Int32
	hold chan struct{}
}

func (g *syncGate) String() string { return "sync gate" }

func (g *syncGate) MaybeError(op errorfs.Op) error {
	if op.Kind == errorfs.OpFileSyncData && strings.HasSuffix(op.Path, segExt) {
		g.n.Add(1)
		<-g.hold
	}
	return nil
}

// Ingests syncing the log at once share syncs: callers whose records were
// written while a sync was in flight wait for it, then one sync covers
// them all. Four callers, two syncs.
func TestSegmentSyncsShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := &syncGate{hold: make(chan struct{})}
		g, err := openSegments(errorfs.Wrap(vfs.NewMem(), gate), "db", segPos{}, false, true)
		if err != nil {
			t.Fatal(err)
		}
		defer g.close()
		write := func(i int) segPos {
			_, end, err := g.appendBodies([][]byte{segRaw(i)})
			if err != nil {
				t.Fatal(err)
			}
			return end
		}
		done := make(chan error, 4)
		first := write(0)
		go func() { done <- g.syncTo(first) }()
		synctest.Wait() // its sync is held
		second := write(1)
		for range 3 {
			go func() { done <- g.syncTo(second) }()
		}
		synctest.Wait()         // waiting: the sync in flight started before their record
		gate.hold <- struct{}{} // the first sync ends
		synctest.Wait()         // one of them syncs for all three
		gate.hold <- struct{}{}
		synctest.Wait()
		syncs := gate.n.Load()
		close(gate.hold) // whatever else waits goes on
		for range 4 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if syncs != 2 {
			t.Fatalf("%d syncs for four callers, want 2", syncs)
		}
	})
}

// garbleBody overwrites a few bytes of the stored body of id.
func garbleBody(t *testing.T, s *Store, id [32]byte) {
	t.Helper()
	v, err := s.get(eventKey(&id))
	if err != nil || len(v) == 0 || v[0] != eventV3 {
		t.Fatalf("E value of %x: %x, %v", id[:4], v, err)
	}
	loc := segLocOf(v)
	f, err := os.OpenFile(segName(filepath.Join(s.opts.Dir, segDirName), loc.seg), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("garbage"), int64(loc.off)+segRecHeader+10); err != nil {
		t.Fatal(err)
	}
}

func mustGet(t *testing.T, s *Store, k []byte) []byte {
	t.Helper()
	v, err := s.get(k)
	if err != nil || v == nil {
		t.Fatalf("get %x: %x, %v", k, v, err)
	}
	return v
}
