package rawstore_test

import (
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

// ENOSPC in the middle of ingesting: the write fails with ErrNoSpace
// naming the directory, every later write fails at once the same way,
// Close returns, the reserve file is gone (released for the close), and
// once space is back every batch whose Ingest returned nil is there.
//
// The cases: the WAL write fails first (Pebble panics in Commit: the
// write gate recovers it), or any data write does (WAL, a flush's sstable
// or blob file: a background error or the gate, whichever comes first).
// Not covered: a MANIFEST write failing first on Pebble's background
// goroutine, which Pebble requires to be fatal; the store then exits with
// one plain line, no stack (see fatal).
func TestNoSpaceDuringIngest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files func(string) bool
	}{
		{"WAL", func(p string) bool { return filepath.Ext(p) == ".log" }},
		{"data files", func(p string) bool { return !strings.Contains(filepath.Base(p), "MANIFEST") }},
	} {
		t.Run(tc.name, func(t *testing.T) { testNoSpaceDuringIngest(t, tc.files) })
	}
}

func testNoSpaceDuringIngest(t *testing.T, files func(string) bool) {
	dir := filepath.Join(t.TempDir(), "archive")
	full := &diskFull{files: files}
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
	committed := map[[32]byte]bool{}
	var noSpace error
	for i := 0; i < 4000 && noSpace == nil; i += 100 {
		if i == 2000 {
			full.on.Store(true)
		}
		b := &rawstore.Batch{Relay: relay}
		for j := i; j < i+100; j++ {
			id, raw := storetest.Event(j)
			b.Events = append(b.Events, rawstore.Copy{ID: id, Raw: raw})
		}
		_, err := s.Ingest(b)
		if err == nil {
			for _, c := range b.Events {
				committed[c.ID] = true
			}
			continue
		}
		noSpace = err
	}
	if !errors.Is(noSpace, rawstore.ErrNoSpace) {
		t.Fatalf("ingest on a full disk: %v, want ErrNoSpace", noSpace)
	}
	t.Logf("first failed write: %v", noSpace)
	_, err = s.Ingest(&rawstore.Batch{Relay: relay, Events: []rawstore.Copy{{ID: [32]byte{1}, Raw: []byte("{}")}}})
	if !errors.Is(err, rawstore.ErrNoSpace) || !errors.Is(s.Failed(), rawstore.ErrNoSpace) {
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
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for id := range committed {
		if srcs, err := s.Sources(id); err != nil || len(srcs) == 0 {
			t.Fatalf("event %x committed before the disk filled is missing after reopen (%v)", id[:4], err)
		}
	}
	if st.Events < int64(len(committed)) {
		t.Errorf("%d events counted, %d committed", st.Events, len(committed))
	}
}
