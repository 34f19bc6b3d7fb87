package rawstore

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
)

// Sorted index builds. The index keys of a verdict go through the WAL, the
// memtable, a flush and compactions of random keys (author, tag, kind
// prefixes): in a verified 1M crawl that was ~28 of ~95 CPU-s and ~14 s of
// wall. A one-shot command that answers no query meanwhile (crawl without
// --serve) defers them instead: Apply hands them to an indexSort, which
// keeps them sorted in runs on disk (its memory bounded by indexSortRun),
// and FinishIndexes merges the runs into tables of distinct keys in order
// and ingests them in one step (into the bottom level where no index key
// overlaps them).
//
// The runs are not durable: DeferIndexes takes the index marks down first
// (the archive says its indexes need building, and Query refuses), and
// FinishIndexes restores those that were up, after the ingest. A sort cut
// off (a crash) leaves them down: BuildIndexes, which covers every valid
// verdict, is what marks the indexes complete again, and a later sort
// finds them down and restores none.

// The marks an index sort restores.
const (
	sortMarkIndexes   = 1 << iota // indexMarkKey
	sortMarkDeletions             // deletionMarkKey
)

// indexSortRun is the bytes of keys an index sort holds in memory before
// it writes them, sorted, as a run; indexSortFanIn runs of one level are
// merged into one of the next (each key is rewritten once a level, and a
// final merge reads at most fanIn runs a level).
var (
	indexSortRun   = 4 << 20
	indexSortFanIn = 64
)

// indexSortTable is the size at which a sorted build starts its next table.
const indexSortTable = 128 << 20

const indexRunSuffix = ".index-run"

type indexSort struct {
	s     *Store
	marks byte     // the marks to restore
	buf   []byte   // the keys in memory, each after its uint16 length
	offs  []uint32 // where each starts in buf, unsorted
	runs  []indexRun
	seq   int
	bytes int // of the keys spilled so far: what the tables will take, at most
}

type indexRun struct {
	path  string
	level int // merges it took: a spill is level 0
}

// DeferIndexes makes the index keys of the verdicts applied from now on
// wait in sorted runs for FinishIndexes (or Close) instead of going
// through the memtable, for a command that answers no query meanwhile.
// Until then the indexes are not ready (IndexesReady, Query).
func (s *Store) DeferIndexes() error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if s.isort != nil {
		return nil
	}
	if s.opts.ReadOnly {
		return errors.New("rawstore: defer indexes: read-only")
	}
	var marks byte
	for _, m := range []struct {
		key []byte
		bit byte
	}{{indexMarkKey, sortMarkIndexes}, {deletionMarkKey, sortMarkDeletions}} {
		ok, err := s.getOK(m.key)
		if err != nil {
			return err
		}
		if ok {
			marks |= m.bit
		}
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Delete(indexMarkKey, nil)
	_ = b.Delete(deletionMarkKey, nil)
	if err := s.gate("defer indexes", b.Len(), func() error { return b.Commit(pebble.Sync) }); err != nil {
		return fmt.Errorf("rawstore: defer indexes: %w", err)
	}
	s.isort = &indexSort{s: s, marks: marks}
	return nil
}

// removeIndexRuns removes the runs an index sort cut off left.
func (s *Store) removeIndexRuns() error {
	names, err := s.opts.FS.List(s.opts.Dir)
	if err != nil {
		return fmt.Errorf("rawstore: list %s: %w", s.opts.Dir, err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, indexRunSuffix) {
			if err := s.opts.FS.Remove(filepath.Join(s.opts.Dir, n)); err != nil {
				return fmt.Errorf("rawstore: remove %s: %w", n, err)
			}
		}
	}
	return nil
}

// add takes the index keys of one Apply (called under applyMu).
func (x *indexSort) add(keys [][]byte) error {
	if x.buf == nil {
		// Sized once: neither grows past a run (a key is ~60 bytes).
		x.buf = make([]byte, 0, indexSortRun+64<<10)
		x.offs = make([]uint32, 0, indexSortRun/32)
	}
	for _, k := range keys {
		x.offs = append(x.offs, uint32(len(x.buf)))
		x.buf = binary.BigEndian.AppendUint16(x.buf, uint16(len(k)))
		x.buf = append(x.buf, k...)
	}
	if len(x.buf) >= indexSortRun {
		return x.spill()
	}
	return nil
}

// spill writes the keys in memory as a sorted run of distinct keys.
func (x *indexSort) spill() error {
	if len(x.offs) == 0 {
		return nil
	}
	key := func(off uint32) []byte {
		n := uint32(binary.BigEndian.Uint16(x.buf[off:]))
		return x.buf[off+2 : off+2+n]
	}
	slices.SortFunc(x.offs, func(a, b uint32) int { return bytes.Compare(key(a), key(b)) })
	x.offs = slices.CompactFunc(x.offs, func(a, b uint32) bool { return bytes.Equal(key(a), key(b)) })
	i := 0
	err := x.writeRun(fmt.Sprintf("spill %d index keys", len(x.offs)), len(x.buf), 0, func() ([]byte, error) {
		if i == len(x.offs) {
			return nil, io.EOF
		}
		i++
		return key(x.offs[i-1]), nil
	})
	if err != nil {
		return err
	}
	x.bytes += len(x.buf)
	x.offs, x.buf = x.offs[:0], x.buf[:0]
	for level := 0; ; level++ {
		var at []indexRun
		for _, r := range x.runs {
			if r.level == level {
				at = append(at, r)
			}
		}
		if len(at) == 0 {
			return nil
		}
		if len(at) >= indexSortFanIn {
			if err := x.mergeRuns(at, level+1); err != nil {
				return err
			}
		}
	}
}

// writeRun writes the keys next yields (sorted, distinct) as a new run of
// level.
func (x *indexSort) writeRun(what string, size, level int, next func() ([]byte, error)) error {
	x.seq++
	path := filepath.Join(x.s.opts.Dir, fmt.Sprintf("%06d%s", x.seq, indexRunSuffix))
	err := x.s.gate(what, size, func() error {
		f, err := x.s.opts.FS.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		w := bufio.NewWriterSize(f, 256<<10)
		var n [binary.MaxVarintLen64]byte
		for {
			k, err := next()
			if err == io.EOF {
				break
			}
			if err != nil {
				_ = f.Close()
				return err
			}
			_, _ = w.Write(n[:binary.PutUvarint(n[:], uint64(len(k)))])
			_, _ = w.Write(k)
		}
		if err := w.Flush(); err != nil {
			_ = f.Close()
			return err
		}
		return f.Close()
	})
	if err != nil {
		return fmt.Errorf("index run %s: %w", path, err)
	}
	x.runs = append(x.runs, indexRun{path: path, level: level})
	return nil
}

// mergeRuns merges runs into one of level.
func (x *indexSort) mergeRuns(runs []indexRun, level int) error {
	m, err := x.openMerge(runs)
	if err != nil {
		return err
	}
	x.runs = slices.DeleteFunc(x.runs, func(r indexRun) bool { return slices.Contains(runs, r) })
	err = x.writeRun(fmt.Sprintf("merge %d index runs", len(runs)), 0, level, m.next)
	if cerr := m.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return x.remove(runs)
}

func (x *indexSort) remove(runs []indexRun) error {
	for _, r := range runs {
		if err := x.s.opts.FS.Remove(r.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove index run: %w", err)
		}
	}
	return nil
}

// reset forgets the keys taken so far (ResetVerdicts forgot their
// verdicts), and restores both marks at the end: every verdict from the
// reset on is in the sort.
func (x *indexSort) reset() error {
	x.offs, x.buf, x.bytes = x.offs[:0], x.buf[:0], 0
	old := x.runs
	x.runs = nil
	x.marks = sortMarkIndexes | sortMarkDeletions
	return x.remove(old)
}

// FinishIndexes builds the deferred index keys into tables, ingests them,
// and restores the index marks DeferIndexes took down. Close calls it. A
// build that fails ends the sort with the marks down.
func (s *Store) FinishIndexes() error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	x := s.isort
	if x == nil {
		return nil
	}
	start := time.Now()
	runs := len(x.runs)
	s.opts.Logger.Debug("building the indexes from the verdicts' sorted keys", zap.Int("runs", runs+1))
	s.isort = nil
	if err := x.finish(); err != nil {
		// Given up, not retried at Close: the marks stay down, and
		// BuildIndexes covers every verdict the sort held.
		_ = s.removeIndexRuns()
		return fmt.Errorf("rawstore: build deferred indexes: %w", err)
	}
	s.opts.Logger.Debug("index keys built from sorted runs", zap.Int("runs", runs),
		zap.Duration("elapsed", time.Since(start).Round(time.Millisecond)))
	return nil
}

func (x *indexSort) finish() error {
	s := x.s
	var paths []string
	defer func() {
		for _, p := range paths {
			_ = s.opts.FS.Remove(p)
		}
	}()
	if len(x.runs) > 0 || len(x.offs) > 0 {
		if err := x.spill(); err != nil {
			return err
		}
		m, err := x.openMerge(x.runs)
		if err != nil {
			return err
		}
		defer m.close()
		for more := true; more; {
			path := filepath.Join(s.opts.Dir, fmt.Sprintf("index-%06d.sst.tmp", len(paths)))
			paths = append(paths, path)
			written := 0
			err := s.gate("write sorted index table", min(indexSortTable, x.bytes), func() error {
				return s.writeFoldTable(path, func(set setFunc) error {
					for written < indexSortTable {
						k, err := m.next()
						if err == io.EOF {
							more = false
							return nil
						}
						if err != nil {
							return err
						}
						if err := set(k, nil); err != nil {
							return err
						}
						written += len(k)
					}
					return nil
				})
			})
			if err != nil {
				return err
			}
		}
		if err := s.gate("ingest sorted indexes", 0, func() error { return s.db.Ingest(context.Background(), paths) }); err != nil {
			return err
		}
	}
	b := s.db.NewBatch()
	defer b.Close()
	if x.marks&sortMarkIndexes != 0 {
		_ = b.Set(indexMarkKey, nil, nil)
	}
	if x.marks&sortMarkDeletions != 0 {
		_ = b.Set(deletionMarkKey, nil, nil)
	}
	if !b.Empty() {
		if err := s.gate("restore index marks", b.Len(), func() error { return b.Commit(pebble.Sync) }); err != nil {
			return err
		}
	}
	return x.remove(x.runs)
}

// runMerge yields the distinct keys of a set of runs in order.
type runMerge struct {
	files []vfs.File
	h     runHeap
	last  []byte
}

type runReader struct {
	r   *bufio.Reader
	key []byte
}

type runHeap []*runReader

func (h runHeap) Len() int           { return len(h) }
func (h runHeap) Less(i, j int) bool { return bytes.Compare(h[i].key, h[j].key) < 0 }
func (h runHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)        { *h = append(*h, x.(*runReader)) }
func (h *runHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// read reads the reader's next key; false at the end of its run.
func (rr *runReader) read() (bool, error) {
	n, err := binary.ReadUvarint(rr.r)
	if err == io.EOF {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if n > 1<<16 {
		return false, fmt.Errorf("index run: a key of %d bytes", n)
	}
	rr.key = slices.Grow(rr.key[:0], int(n))[:n]
	_, err = io.ReadFull(rr.r, rr.key)
	return err == nil, err
}

func (x *indexSort) openMerge(runs []indexRun) (*runMerge, error) {
	m := &runMerge{}
	for _, run := range runs {
		p := run.path
		f, err := x.s.opts.FS.Open(p)
		if err != nil {
			_ = m.close()
			return nil, fmt.Errorf("open index run: %w", err)
		}
		m.files = append(m.files, f)
		rr := &runReader{r: bufio.NewReaderSize(f, 32<<10)}
		ok, err := rr.read()
		if err != nil {
			_ = m.close()
			return nil, fmt.Errorf("read index run %s: %w", p, err)
		}
		if ok {
			m.h = append(m.h, rr)
		}
	}
	heap.Init(&m.h)
	return m, nil
}

// next returns the next distinct key (valid until the next call), or
// io.EOF.
func (m *runMerge) next() ([]byte, error) {
	if len(m.h) == 0 {
		return nil, io.EOF
	}
	m.last = append(m.last[:0], m.h[0].key...)
	for len(m.h) > 0 && bytes.Equal(m.h[0].key, m.last) {
		if err := m.advance(); err != nil {
			return nil, err
		}
	}
	return m.last, nil
}

// advance moves the reader of the smallest key to its next key, or drops
// it at its run's end.
func (m *runMerge) advance() error {
	ok, err := m.h[0].read()
	if err != nil {
		return fmt.Errorf("read index run: %w", err)
	}
	if ok {
		heap.Fix(&m.h, 0)
	} else {
		heap.Pop(&m.h)
	}
	return nil
}

func (m *runMerge) close() error {
	var err error
	for _, f := range m.files {
		err = errors.Join(err, f.Close())
	}
	m.files = nil
	return err
}
