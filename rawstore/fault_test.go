package rawstore_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/rawstore/storetest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// diskFull fails every file write with ENOSPC while on, as a full file
// system does (creating, removing and reading still work). Removing the
// store's space reserve turns it off: the reserve is the room the store
// frees to finish its flush and close.
type diskFull struct {
	on    atomic.Bool
	files func(path string) bool // which files' writes fail
}

func (d *diskFull) String() string { return "disk full" }

func (d *diskFull) MaybeError(op errorfs.Op) error {
	if op.Kind == errorfs.OpRemove && filepath.Base(op.Path) == "archiver.reserve" {
		d.on.Store(false)
	}
	if !d.on.Load() {
		return nil
	}
	if !d.files(op.Path) {
		return nil
	}
	switch op.Kind {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFilePreallocate, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
	}
	return nil
}

// within fails the test if fn does not return in d: a hang on a full disk
// is the bug (issue 12: stats, export and run spun for 10 minutes).
func within(t *testing.T, d time.Duration, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
		return nil
	}
}

// smallDisk reports free as the file system's available space.
type smallDisk struct {
	vfs.FS
	free atomic.Uint64
}

func (d *smallDisk) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	du, err := d.FS.GetDiskUsage(path)
	du.AvailBytes = d.free.Load()
	return du, err
}

// batch is events [from, to) of relay.
func batch(relay uint32, from, to int) *rawstore.Batch {
	b := &rawstore.Batch{Relay: relay}
	for j := from; j < to; j++ {
		id, raw := storetest.Event(j)
		b.Events = append(b.Events, rawstore.Copy{ID: id, Raw: raw})
	}
	return b
}

// When free space falls below what Pebble may need after a write, the
// store refuses the write (ErrNoSpace, naming the directory and the space
// free) before Pebble meets ENOSPC, which it cannot survive (a WAL that
// cannot be rotated panics with its mutex released: a Go fatal error).
// Nothing is written, the store has not failed, and writes go on once
// space is back. Before: the crawl died with a fatal line and a stack.
func TestNoSpaceRefusedBeforePebbleRunsOut(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "archive")
	disk := &smallDisk{FS: vfs.Default}
	disk.free.Store(20 << 20) // a 20 MiB file system: small memtables, a small reserve
	s, err := rawstore.Open(rawstore.Options{Dir: dir, FS: disk})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	relay, err := s.RelayIndex("ws://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ingest(batch(relay, 0, 100)); err != nil {
		t.Fatalf("ingest with 20 MiB free: %v", err)
	}
	disk.free.Store(2 << 20)
	_, err = s.Ingest(batch(relay, 100, 200))
	if !errors.Is(err, rawstore.ErrNoSpace) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "2.0 MiB free") {
		t.Fatalf("ingest with 2 MiB free: %v, want ErrNoSpace naming %s and 2.0 MiB free", err, dir)
	}
	if s.Failed() != nil {
		t.Errorf("a refused write failed the store: %v", s.Failed())
	}
	if st := mustStats(t, s); st.Events != 100 {
		t.Errorf("%d events after the refused batch, want 100", st.Events)
	}
	disk.free.Store(20 << 20)
	if _, err := s.Ingest(batch(relay, 100, 200)); err != nil {
		t.Fatalf("ingest once space is back: %v", err)
	}
	if st := mustStats(t, s); st.Events != 200 {
		t.Errorf("%d events, want 200", st.Events)
	}
}

// A close whose fold is refused for want of space is still a clean
// close: the fold wrote nothing, the journal stays in the WAL, and the
// next writable open folds it. Before, the crawl that had just reported
// the full disk printed a second error line for it ("closing archive:
// no space").
func TestCloseWithNoSpaceLeavesJournalToNextOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "archive")
	disk := &smallDisk{FS: vfs.Default}
	disk.free.Store(20 << 20)
	core, logs := observer.New(zap.WarnLevel)
	s, err := rawstore.Open(rawstore.Options{Dir: dir, FS: disk, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	relay, err := s.RelayIndex("ws://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ingest(batch(relay, 0, 100)); err != nil {
		t.Fatal(err)
	}
	if n := s.JournalEntries(); n != 100 {
		t.Fatalf("%d journal entries before close, want 100", n)
	}
	disk.free.Store(2 << 20)
	if err := s.Close(); err != nil {
		t.Fatalf("close with no space to fold: %v", err)
	}
	if w := logs.FilterMessageSnippet("journal unfolded").All(); len(w) != 1 || w[0].ContextMap()["entries"] != int64(100) {
		t.Errorf("warnings at close: %v, want one naming 100 unfolded entries", logs.All())
	}

	s, err = rawstore.Open(rawstore.Options{Dir: dir})
	if err != nil {
		t.Fatalf("reopen once space is back: %v", err)
	}
	defer s.Close()
	if n := s.JournalEntries(); n != 0 {
		t.Errorf("%d journal entries after a writable open, want 0 (folded)", n)
	}
	if st := mustStats(t, s); st.Events != 100 {
		t.Errorf("%d events after reopening, want 100", st.Events)
	}
	for i := 0; i < 100; i++ {
		id, raw := storetest.Event(i)
		if h, err := s.Lookup(id); err != nil || !bytes.Equal(h.Primary, raw) {
			t.Fatalf("event %d after reopening: %q, %v", i, h.Primary, err)
		}
	}
}

func mustStats(t *testing.T, s *rawstore.Store) rawstore.Stats {
	t.Helper()
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// ENOSPC that Pebble meets anyway (a flush writing its tables): the
// background error fails the store once with ErrNoSpace (before: logged
// on every retry, 9.4 MB of them, for ever), the reserve file is released
// so the flush can finish, every later write fails at once the same way,
// Close returns, and every batch whose Ingest returned nil is there after
// reopening.
func TestNoSpaceInBackgroundFlush(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "archive")
	full := &diskFull{files: func(p string) bool { ext := filepath.Ext(p); return ext == ".sst" || ext == ".blob" }}
	s, err := rawstore.Open(rawstore.Options{Dir: dir, FS: errorfs.Wrap(vfs.Default, full), MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "archiver.reserve")); err != nil {
		t.Fatalf("no reserve file: %v", err)
	}
	relay, err := s.RelayIndex("ws://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	full.on.Store(true)
	committed := map[[32]byte]bool{}
	var noSpace error
	// 1 MiB memtables: a flush starts every ~1,500 events; the loop's
	// bound is far beyond the first.
	for i := 0; i < 50_000 && noSpace == nil; i += 100 {
		b := batch(relay, i, i+100)
		if _, err := s.Ingest(b); err != nil {
			noSpace = err
			break
		}
		for _, c := range b.Events {
			committed[c.ID] = true
		}
	}
	if !errors.Is(noSpace, rawstore.ErrNoSpace) || !strings.Contains(noSpace.Error(), dir) {
		t.Fatalf("ingest while flushes fail with ENOSPC: %v, want ErrNoSpace naming %s", noSpace, dir)
	}
	t.Logf("first failed write after %d events: %v", len(committed), noSpace)
	if _, err := s.Ingest(batch(relay, 0, 1)); !errors.Is(err, rawstore.ErrNoSpace) || !errors.Is(s.Failed(), rawstore.ErrNoSpace) {
		t.Errorf("write after the failure: %v (Failed: %v), want ErrNoSpace", err, s.Failed())
	}
	if _, err := os.Stat(filepath.Join(dir, "archiver.reserve")); !os.IsNotExist(err) {
		t.Errorf("reserve file still there after ENOSPC: %v", err)
	}
	_ = within(t, 20*time.Second, "Close", s.Close)

	s, err = rawstore.Open(rawstore.Options{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatalf("reopen once space is back: %v", err)
	}
	defer s.Close()
	for id := range committed {
		if srcs, err := s.Sources(id); err != nil || len(srcs) == 0 {
			t.Fatalf("event %x committed before the disk filled is missing after reopen (%v)", id[:4], err)
		}
	}
	if st := mustStats(t, s); st.Events < int64(len(committed)) {
		t.Errorf("%d events counted, %d committed", st.Events, len(committed))
	}
}

// ENOSPC writing event bodies to the segment log: the ingest fails with
// ErrNoSpace naming the directory, as Pebble's ENOSPC does, the store
// takes no more writes, and every batch whose Ingest returned nil reads
// back whole after reopening (the bodies written before the failure but
// never committed are garbage past the committed tail).
func TestNoSpaceInSegmentWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "archive")
	full := &diskFull{files: func(p string) bool { return filepath.Ext(p) == ".seg" }}
	s, err := rawstore.Open(rawstore.Options{Dir: dir, FS: errorfs.Wrap(vfs.Default, full)})
	if err != nil {
		t.Fatal(err)
	}
	relay, err := s.RelayIndex("ws://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	committed := map[[32]byte][]byte{}
	for i := 0; i < 1000; i += 100 {
		if i == 500 {
			full.on.Store(true)
		}
		b := batch(relay, i, i+100)
		if _, err = s.Ingest(b); err != nil {
			break
		}
		for _, c := range b.Events {
			committed[c.ID] = c.Raw
		}
	}
	if !errors.Is(err, rawstore.ErrNoSpace) || !strings.Contains(err.Error(), dir) || len(committed) != 500 {
		t.Fatalf("ingest after %d events while segment writes fail with ENOSPC: %v, want ErrNoSpace naming %s after 500", len(committed), err, dir)
	}
	if _, err := s.Ingest(batch(relay, 2000, 2001)); !errors.Is(err, rawstore.ErrNoSpace) || !errors.Is(s.Failed(), rawstore.ErrNoSpace) {
		t.Errorf("write after the failure: %v (Failed: %v), want ErrNoSpace", err, s.Failed())
	}
	_ = within(t, 20*time.Second, "Close", s.Close)

	s, err = rawstore.Open(rawstore.Options{Dir: dir})
	if err != nil {
		t.Fatalf("reopen once space is back: %v", err)
	}
	defer s.Close()
	for id, raw := range committed {
		if h, err := s.Lookup(id); err != nil || !bytes.Equal(h.Primary, raw) {
			t.Fatalf("event %x committed before the disk filled: %d bytes after reopen, %v", id[:4], len(h.Primary), err)
		}
	}
	if st := mustStats(t, s); st.Events != int64(len(committed)) {
		t.Errorf("%d events counted, %d committed", st.Events, len(committed))
	}
	if _, err := s.Ingest(batch(relay, 500, 600)); err != nil {
		t.Fatalf("ingest after reopening: %v", err)
	}
	if rep, err := s.Check(); err != nil || rep.Damaged != 0 || rep.Events != 600 {
		t.Errorf("check: %d events, %d damaged, %v; want 600, none", rep.Events, rep.Damaged, err)
	}
}
