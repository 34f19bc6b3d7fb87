package rawstore

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Notes are small records the daemon keeps on relay URLs that need not be
// registered relays (a dead relay's backoff, a URL discovery found): one
// value per (kind, url), written in batches and read back whole at start.
// They are not part of the archive's data and never enter its counters.

func noteKey(kind byte, url string) []byte { return append([]byte{prefixNote, kind}, url...) }

// PutNotes writes notes of one kind in one synced batch; a nil value
// deletes the note.
func (s *Store) PutNotes(kind byte, notes map[string][]byte) error {
	size := 0
	for u, v := range notes {
		size += len(u) + len(v) + 2
	}
	return s.gate(fmt.Sprintf("write %d relay notes", len(notes)), size, func() error {
		b := s.db.NewBatch()
		defer b.Close()
		for u, v := range notes {
			if v == nil {
				_ = b.Delete(noteKey(kind, u), nil)
			} else {
				_ = b.Set(noteKey(kind, u), v, nil)
			}
		}
		return b.Commit(pebble.Sync)
	})
}

// Notes returns every note of one kind by URL.
func (s *Store) Notes(kind byte) (map[string][]byte, error) {
	out, err := s.collect([]byte{prefixNote, kind})
	if err != nil {
		return nil, fmt.Errorf("rawstore: read relay notes: %w", err)
	}
	return out, nil
}
