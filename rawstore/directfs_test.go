package rawstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// directDir returns a directory on a file system that takes O_DIRECT, or
// skips the test.
func directDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	probe, err := vfs.Default.Create(filepath.Join(dir, "probe"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if err := setDirect(probe, true); err != nil {
		t.Skipf("the file system under %s refuses O_DIRECT: %v", dir, err)
	}
	return dir
}

// Writes of every size, with syncs between them (a sync writes a padded
// partial block that later writes rewrite), read back byte for byte
// through an ordinary descriptor, the length exact after each sync and at
// the close; files that are not a flush's tables are not wrapped.
func TestDirectTables(t *testing.T) {
	t.Parallel()
	dir := directDir(t)
	fs := directFS{FS: vfs.Default, made: new(atomic.Int64)}
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 6 {
		name := filepath.Join(dir, fmt.Sprintf("%06d.sst", round))
		f, err := fs.Create(name, flushWrites)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := f.(*directFile); !ok {
			t.Fatalf("%s: not written directly", name)
		}
		if fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); err != nil || fl&unix.O_DIRECT == 0 {
			t.Fatalf("%s: O_DIRECT not set (flags %#x, %v)", name, fl, err)
		}
		var want []byte
		for w := range 200 {
			n := rng.IntN(3 * dioAlign)
			if w%17 == 0 {
				n = directWriteChunk + rng.IntN(dioAlign) // more than the buffer at once
			}
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			want = append(want, p...)
			if _, err := f.Write(p); err != nil {
				t.Fatal(err)
			}
			if fi, err := f.Stat(); err != nil || fi.Size() != int64(len(want)) {
				t.Fatalf("%s: Stat after %d bytes: %v, %v", name, len(want), fi, err)
			}
			if w%(round+3) == 0 {
				if err := f.SyncData(); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(name)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s after a sync at %d bytes: read %d bytes (%v), differing from what was written", name, len(want), len(got), err)
				}
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(name); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: read %d bytes of %d (%v), differing from what was written", name, len(got), len(want), err)
		}
	}
	for _, c := range []struct {
		name     string
		category vfs.DiskWriteCategory
	}{{"000001.log", flushWrites}, {"000002.sst", "pebble-compaction"}} {
		f, err := fs.Create(filepath.Join(dir, c.name), c.category)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, ok := f.(*directFile); ok {
			t.Fatalf("%s of %s is written directly", c.name, c.category)
		}
	}
	if n := fs.made.Load(); n != 6 {
		t.Fatalf("%d files written directly, want 6", n)
	}
}

// failingFile fails every write with err.
type failingFile struct {
	vfs.File
	err error
}

func (f failingFile) WriteAt([]byte, int64) (int, error) { return 0, f.err }

// A failed write is returned, names the file, and every later write,
// sync and close returns it too: the table's tail is unknown.
func TestDirectTableWriteFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	inner, err := vfs.Default.Create(filepath.Join(dir, "000009.sst"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	f := &directFile{File: failingFile{inner, syscall.ENOSPC}, name: "000009.sst", buf: alignedBuf(directWriteChunk)[:0]}
	if _, err := f.Write(make([]byte, 100)); err != nil {
		t.Fatalf("a write that fits the buffer failed: %v", err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Sync: %v, want ENOSPC", err)
	}
	for what, err := range map[string]error{
		"write": func() error { _, err := f.Write([]byte{1}); return err }(),
		"sync":  f.SyncData(),
		"close": f.Close(),
	} {
		if !errors.Is(err, syscall.ENOSPC) || !bytes.Contains([]byte(err.Error()), []byte("000009.sst")) {
			t.Errorf("%s after the failed write: %v", what, err)
		}
	}
}

// A store on a file system that takes O_DIRECT: flushed tables (written
// directly) and compacted ones hold every event after a reopen, and check
// finds them all.
func TestDirectTablesStore(t *testing.T) {
	t.Parallel()
	db := filepath.Join(directDir(t), "db")
	s, err := Open(Options{Dir: db, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	rel, err := s.RelayIndex("wss://direct")
	if err != nil {
		t.Fatal(err)
	}
	const batches, size = 20, 100
	for bn := range batches {
		var evs []Copy
		for j := range size {
			evs = append(evs, Copy{ID: id(bn*size + j), Raw: segRaw(bn*size + j)})
		}
		mustIngest(t, s, &Batch{Relay: rel, Events: evs})
		if bn%5 == 4 {
			if err := s.db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := s.directMade.Load(); n == 0 {
		t.Fatal("no flushed table was written directly")
	}
	if err := s.db.Compact(t.Context(), nil, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	if n := s.db.Metrics().Total().TablesCount; n == 0 {
		t.Fatal("no tables written")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Options{Dir: db, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for n := range batches * size {
		k := id(n)
		v, closer, err := s.db.Get(eventKey(&k))
		if err != nil {
			t.Fatalf("event %d after the reopen: %v", n, err)
		}
		if len(v) == 0 || v[0] != eventV3 {
			t.Fatalf("event %d: E value %x", n, v)
		}
		closer.Close()
	}
	rep, err := s.Check()
	if err != nil || rep.Events != batches*size || rep.Damaged != 0 {
		t.Fatalf("check: %+v, %v", rep, err)
	}
}
