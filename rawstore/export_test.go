package rawstore

import (
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// RaceEnabled says whether the tests run under the race detector.
const RaceEnabled = raceEnabled

// DropIndexes makes s look like an archive from before the indexes.
func (s *Store) DropIndexes() error {
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange([]byte{prefixIndex}, []byte{prefixIndex + 1}, nil)
	_ = b.Delete(indexMarkKey, nil)
	_ = b.Delete(deletionMarkKey, nil)
	return b.Commit(pebble.Sync)
}

// DropDeletionIndex makes s an archive indexed before the deletion index.
func (s *Store) DropDeletionIndex() error {
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange([]byte{prefixIndex, idxDeletion}, []byte{prefixIndex, idxDeletion + 1}, nil)
	_ = b.Delete(deletionMarkKey, nil)
	return b.Commit(pebble.Sync)
}

// SetIndexBuildBatch sets indexBuildBatch, returning a func restoring it.
func SetIndexBuildBatch(n int) func() {
	old := indexBuildBatch
	indexBuildBatch = n
	return func() { indexBuildBatch = old }
}

// SetPageLimits sets pageKeys and pageBytes, returning a func restoring
// them.
func SetPageLimits(keys, bytes int) func() {
	oldKeys, oldBytes := pageKeys, pageBytes
	pageKeys, pageBytes = keys, bytes
	return func() { pageKeys, pageBytes = oldKeys, oldBytes }
}

// JournalEntries is how many new copies wait in the journal for a fold.
func (s *Store) JournalEntries() int { return s.pendingCount() }

// SetIndexSort sets indexSortRun and indexSortFanIn, returning a func
// restoring them.
func SetIndexSort(run, fanIn int) func() {
	oldRun, oldFanIn := indexSortRun, indexSortFanIn
	indexSortRun, indexSortFanIn = run, fanIn
	return func() { indexSortRun, indexSortFanIn = oldRun, oldFanIn }
}

// AbandonIndexSort drops a deferred index sort unfinished, as a process
// that dies does: its runs stay on disk, the marks down.
func (s *Store) AbandonIndexSort() {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.isort = nil
}

// IndexRunFiles counts the index runs in the archive's directory.
func (s *Store) IndexRunFiles() (int, error) {
	names, err := s.opts.FS.List(s.opts.Dir)
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, indexRunSuffix) {
			n++
		}
	}
	return n, err
}
