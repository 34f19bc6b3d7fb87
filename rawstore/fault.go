package rawstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
)

// ErrNoSpace is matched (errors.Is) by a write that failed because the
// archive's file system is full; the message names the directory and the
// space left. The store takes no more writes after it.
var ErrNoSpace = errors.New("no space left for the archive")

// ErrFailed is matched by every write after the store hit an error Pebble
// cannot recover from in this process (a failed WAL or MANIFEST write, a
// background error that repeats): the archive on disk is consistent up to
// the last commit that returned nil; reopen it once the cause is fixed.
var ErrFailed = errors.New("archive store failed")

// DefaultReserveBytes is the space reserve a writable store keeps in a
// file of its own and frees on ENOSPC, so that the flush and close after
// the error can still write (Pebble's own needs: a memtable flush, a
// MANIFEST record).
const DefaultReserveBytes = 4 << 20

// reserveName is the reserve file, a name Pebble ignores.
const reserveName = "archiver.reserve"

// fatalPanic carries a Pebble Fatalf out of the write gate that recovers
// it (see zapPebbleLogger.Fatalf).
type fatalPanic struct{ msg string }

// faults is the store's failure state.
type faults struct {
	dir     string
	fs      vfs.FS
	log     *zap.Logger
	failed  atomic.Pointer[error]
	bgOnce  sync.Once // the first background error is logged; the rest counted
	bgCount atomic.Int64
	reserve atomic.Bool // the reserve file exists
	space   freeSpace   // the last statfs (see room)
	// damagedFiles are the files whose damage was logged (see listener).
	damagedFiles sync.Map
}

// err is the error every write returns once the store failed, or nil.
func (f *faults) err() error {
	if p := f.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// fail records the store's failure (the first one wins) and frees the
// reserve on ENOSPC, and returns the error the caller should see.
func (f *faults) fail(what string, cause error) error {
	var err error
	if isNoSpace(cause) {
		f.releaseReserve()
		err = fmt.Errorf("%w: %s (%s free): %s", ErrNoSpace, f.dir, f.freeString(), what)
	} else {
		err = fmt.Errorf("%w: %s: %s: %v", ErrFailed, f.dir, what, cause)
	}
	f.failed.CompareAndSwap(nil, &err)
	return *f.failed.Load()
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		(err != nil && strings.Contains(err.Error(), "no space left on device"))
}

func (f *faults) freeString() string {
	du, err := f.fs.GetDiskUsage(f.dir)
	if err != nil {
		return "unknown space"
	}
	return humanBytes(du.AvailBytes)
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// makeReserve writes the reserve file (n bytes; 0 means none). A disk too
// full for it is not an error here: the first write will say so.
func (f *faults) makeReserve(n int64) {
	if n <= 0 {
		return
	}
	name := filepath.Join(f.dir, reserveName)
	if fi, err := f.fs.Stat(name); err == nil && fi.Size() >= n {
		f.reserve.Store(true)
		return
	}
	file, err := f.fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return
	}
	// Zeros written, not a sparse Truncate: the blocks must be allocated
	// to be freed later.
	buf := make([]byte, 64<<10)
	for off := int64(0); off < n && err == nil; off += int64(len(buf)) {
		_, err = file.Write(buf[:min(int64(len(buf)), n-off)])
	}
	if err == nil {
		err = file.Sync()
	}
	_ = file.Close()
	if err != nil {
		_ = f.fs.Remove(name)
		return
	}
	f.reserve.Store(true)
}

func (f *faults) releaseReserve() {
	if f.reserve.CompareAndSwap(true, false) {
		if err := f.fs.Remove(filepath.Join(f.dir, reserveName)); err == nil {
			f.log.Warn("disk full: released the space reserve so the archive can close cleanly",
				zap.String("dir", f.dir))
		}
	}
}

// listener is the store's part of Pebble's event listener: corruption is
// reported, not fatal (reads skip the damaged records, see Damage), and
// background errors (a flush or compaction that cannot write) fail the
// store once instead of being logged on every retry.
func (f *faults) listener() pebble.EventListener {
	return pebble.EventListener{
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			// Once per file: every read of a damaged block reports it
			// (a check of 20k events logged one file 290 times).
			if _, seen := f.damagedFiles.LoadOrStore(info.Path, true); !seen {
				f.log.Warn("archive file damaged", zap.String("file", info.Path), zap.String("detail", fmt.Sprint(info.Details)))
			}
		},
		BackgroundError: func(err error) {
			if f.bgCount.Add(1) > 1 {
				return
			}
			f.bgOnce.Do(func() {
				if !isNoSpace(err) && pebble.IsCorruptionError(err) {
					// A compaction meeting a damaged block: reads still
					// skip it; not a reason to stop writing.
					f.log.Warn("archive background work met damage", zap.Error(err))
					return
				}
				err := f.fail("background flush or compaction", err)
				f.log.Error("archive store failed", zap.Error(err))
			})
		},
	}
}

// gate runs a write: it refuses it once the store failed, and turns both a
// write error and Pebble's Fatalf (a failed WAL write panics out of
// Commit, see zapPebbleLogger) into the store's failure.
func (s *Store) gate(what string, size int, write func() error) (err error) {
	if err := s.faults.err(); err != nil {
		return err
	}
	if err := s.faults.room(size, s.opts.MemTableSize); err != nil {
		return err
	}
	defer func() {
		// Pebble panics with the error when a WAL write fails (db.go,
		// commitWrite) and calls Fatalf when a commit fails; either way
		// its commit pipeline is unusable, so the store fails.
		switch r := recover().(type) {
		case nil:
		case fatalPanic:
			err = s.faults.fail(what, errors.New(r.msg))
		case error:
			err = s.faults.fail(what, r)
		default:
			panic(r)
		}
	}()
	if err := write(); err != nil {
		if s.opts.ReadOnly {
			return fmt.Errorf("rawstore: %s: archive opened read-only: %w", what, err)
		}
		if isNoSpace(err) {
			return s.faults.fail(what, err)
		}
		return fmt.Errorf("rawstore: %s: %w", what, err)
	}
	return nil
}

// room refuses a write of size bytes (ErrNoSpace, nothing written) when
// the file system has less free space than Pebble may need after it: the
// WAL and the memtable's flush output of what is buffered (twice the
// memtable), this write thrice (WAL, memtable, flushed table), and a
// margin for the MANIFEST. Pebble cannot survive running out: a WAL that
// cannot be written or rotated panics with its mutex released (a Go fatal
// error, not recoverable), a MANIFEST write calls Fatalf. So the store
// stops writing first, and the refusal is not a failure: writes resume
// when space is back.
func (f *faults) room(size int, memTable uint64) error {
	need := 2*memTable + 3*uint64(size) + minMargin
	if f.space.admit(need, 3*uint64(size)) {
		return nil
	}
	du, err := f.fs.GetDiskUsage(f.dir)
	if err != nil {
		return nil // no way to tell; Pebble's own errors remain
	}
	f.space.measured(du.AvailBytes)
	if du.AvailBytes >= need {
		return nil
	}
	return fmt.Errorf("%w: %s has %s free, the archive needs %s free to write safely; free some space or use --data on a bigger disk",
		ErrNoSpace, f.dir, humanBytes(du.AvailBytes), humanBytes(need))
}

// freeSpace remembers the last statfs so that room need not ask for
// every write (a 1M-event crawl made ~2,000 a second, 0.09 CPU-s): far
// from full, a write is admitted against the last reading less what was
// admitted since, for at most statfsEvery; near full (less than
// statfsSlack beyond the need), every write asks again. Another process
// filling the disk in between is the race every statfs has; the space
// reserve (releaseReserve) is the store's room for it.
type freeSpace struct {
	mu    sync.Mutex
	avail uint64    // the last reading, less what was admitted since
	at    time.Time // when it was read; zero: never
}

const (
	statfsEvery = 250 * time.Millisecond
	statfsSlack = 64 << 20
)

// admit charges a write of cost bytes needing need free against the last
// reading, and reports false when that cannot vouch for it.
func (s *freeSpace) admit(need, cost uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at.IsZero() || time.Since(s.at) > statfsEvery || s.avail < need+statfsSlack+cost {
		return false
	}
	s.avail -= cost
	return true
}

// measured records a fresh reading.
func (s *freeSpace) measured(avail uint64) {
	s.mu.Lock()
	s.avail, s.at = avail, time.Now()
	s.mu.Unlock()
}

// availBytes is the free space of dir's file system (or its parent's,
// before dir exists).
func availBytes(fs vfs.FS, dir string) (uint64, bool) {
	du, err := fs.GetDiskUsage(dir)
	if err != nil {
		du, err = fs.GetDiskUsage(filepath.Dir(dir))
	}
	return du.AvailBytes, err == nil
}

// minMargin is the free space kept beyond the memtables' needs.
const minMargin = 1 << 20

// memTableFor sizes the memtable for a file system with avail bytes free
// when none was asked for: an eighth of the free space, between 256 KiB
// and 32 MiB, so that a small disk can hold an archive at all (with 32
// MiB memtables a 20 MiB file system could take no write).
func memTableFor(avail uint64) uint64 {
	return min(max(avail/8, 256<<10), 32<<20)
}

// SpaceNeeded is the free space below which the store refuses even an
// empty write (see room): what its memtables may still need. A guard
// that pauses crawling adds it to its own floor (diskguard.Options.Extra).
func (s *Store) SpaceNeeded() uint64 { return 2*s.opts.MemTableSize + minMargin }

// Failed returns the store's failure (ErrNoSpace, ErrFailed) or nil.
func (s *Store) Failed() error { return s.faults.err() }

// inGate reports whether the calling goroutine is inside Store.gate or
// Open, where a panic is recovered: a Fatalf elsewhere (a background
// goroutine of Pebble) cannot be.
func inGate() bool {
	buf := make([]byte, 64<<10)
	st := string(buf[:runtime.Stack(buf, false)])
	return strings.Contains(st, "rawstore.(*Store).gate") || strings.Contains(st, "rawstore.Open(")
}

// fatal is Pebble's Fatalf: inside the write gate (or Open) it panics for
// the gate to recover into an error; on a background goroutine, where
// nothing can recover it and Pebble must not go on, it says what happened
// in one line and exits, without a Go stack.
func fatal(log *zap.Logger, dir string, msg string) {
	if inGate() {
		panic(fatalPanic{msg})
	}
	log.Error("archive store failed; exiting", zap.String("dir", dir), zap.String("error", msg))
	_ = log.Sync()
	if isNoSpace(errors.New(msg)) {
		fmt.Fprintf(os.Stderr, "archiver: %s: %v: %s\n", dir, ErrNoSpace, msg)
	}
	os.Exit(1)
}
