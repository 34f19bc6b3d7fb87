package rawstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/rawstore/storetest"
)

// validIDs reads ForEachValid and returns what it passed and its error.
func validIDs(t *testing.T, s *rawstore.Store) (map[[32]byte]bool, error) {
	t.Helper()
	got := map[[32]byte]bool{}
	err := s.ForEachValid(func(id [32]byte, raw []byte) error {
		if want, _ := storetest.Event(0); len(raw) < 600 || got[id] {
			t.Errorf("event %x: %d bytes, seen before %v (event 0 is %x)", id[:4], len(raw), got[id], want[:4])
		}
		got[id] = true
		return nil
	})
	return got, err
}

// 4 KiB garbled in the middle of a real blob file (issue 12's case):
// reads skip the damaged bodies and name them, check finds exactly them,
// and reprocess --all neither stops nor forgets their verdicts. Before:
// export panicked (slice bounds out of range) after part of the archive,
// the reset forgot every verdict and the scan stopped at the checksum
// mismatch, leaving the rest pending for ever.
func TestGarbledBlob(t *testing.T) {
	const n = 3000
	for _, ext := range []string{".blob", ".sst"} {
		t.Run(ext, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "archive")
			ids := storetest.Fill(t, dir, "ws://127.0.0.1:1", n)
			storetest.Garble(t, dir, ext, 4096)

			s, err := rawstore.Open(rawstore.Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()

			got, err := validIDs(t, s)
			var de *rawstore.DamageError
			if !errors.As(err, &de) || !errors.Is(err, rawstore.ErrCorrupt) {
				t.Fatalf("ForEachValid: %v, want a DamageError", err)
			}
			rep, err := s.Check()
			if err != nil {
				t.Fatal(err)
			}
			damaged := map[[32]byte]bool{}
			for _, id := range rep.DamagedIDs {
				damaged[id] = true
			}
			if len(damaged) == 0 || len(got)+len(damaged) != n {
				t.Errorf("read %d valid, check names %d damaged ids (%d records); want them to add up to %d", len(got), len(damaged), rep.Damaged, n)
			}
			for id := range got {
				if damaged[id] || !ids[id] {
					t.Errorf("event %x read back yet damaged (%v) or never stored (%v)", id[:4], damaged[id], !ids[id])
				}
			}
			t.Logf("%s: %d of %d events readable, %d damaged records: %+v; foreach: %v", ext, len(got), n, rep.Damaged, rep, de)

			// reprocess --all: every readable body is judged again, every
			// damaged one keeps its verdict, nothing stays pending.
			if _, err := s.ResetVerdicts(); err != nil {
				t.Fatal(err)
			}
			judged, err := s.ScanPending(context.Background(), 100, storetest.AllValid)
			if err != nil {
				t.Fatalf("scan after reset: %v", err)
			}
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if judged != len(got) || st.Valid != n || st.Pending != 0 || st.Invalid != 0 {
				t.Errorf("after reprocess --all: judged %d (want %d), stats %+v (want %d valid, 0 pending)", judged, len(got), st, n)
			}
			again, err := validIDs(t, s)
			if !errors.Is(err, rawstore.ErrCorrupt) || len(again) != len(got) {
				t.Errorf("after reprocess: %d valid read (want %d), err %v", len(again), len(got), err)
			}
		})
	}
}
