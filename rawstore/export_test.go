package rawstore

import "github.com/cockroachdb/pebble/v2"

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
