// Package storetest builds real archives on disk and damages them, for the
// fault tests of rawstore and the commands, and verified archives of test
// relay fixtures, for the tests that read them back (serve, interop).
package storetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/lazyparse"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/testrelay"
)

// Event returns the i-th test event: well formed, its id computed, its
// signature zero (Fill judges them valid by fiat), content long enough
// (about 600 bytes) that Pebble keeps the body in a blob file.
func Event(i int) (id [32]byte, raw []byte) {
	e := &event.Event{CreatedAt: 1_700_000_000 + int64(i), Kind: 1, Tags: [][]string{},
		Content: fmt.Sprintf("event %d ", i) + strings.Repeat("x", 600)}
	e.PubKey[0] = 1
	e.ID, _ = e.ComputeID(nil)
	return e.ID, event.AppendJSON(nil, e)
}

// Fill creates an archive in dir holding events 0..n-1 from relay url,
// every one judged valid, flushed to sstables and blob files, and closes
// it. It returns the ids.
func Fill(t testing.TB, dir, url string, n int) map[[32]byte]bool {
	t.Helper()
	return FillWith(t, rawstore.Options{Dir: dir}, url, n)
}

// FillWith is Fill with the store opened with o (o.Dir the archive).
func FillWith(t testing.TB, o rawstore.Options, url string, n int) map[[32]byte]bool {
	t.Helper()
	s, err := rawstore.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	relay, err := s.RelayIndex(url)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[[32]byte]bool{}
	b := &rawstore.Batch{Relay: relay}
	for i := range n {
		id, raw := Event(i)
		ids[id] = true
		b.Events = append(b.Events, rawstore.Copy{ID: id, Raw: raw})
		if len(b.Events) == 500 || i == n-1 {
			if _, err := s.Ingest(b); err != nil {
				t.Fatal(err)
			}
			b = &rawstore.Batch{Relay: relay}
		}
	}
	if _, err := s.ScanPending(context.Background(), 500, AllValid); err != nil {
		t.Fatal(err)
	}
	// One table, as a long-lived archive's last level: the E keys (in
	// a table of their own after the fold, see rawstore/journal.go)
	// sort first but for the counters.
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	return ids
}

// DrainQueue judges everything queued with AllValid.
func DrainQueue(t testing.TB, s *rawstore.Store) {
	t.Helper()
	if _, err := s.DrainQueue(context.Background(), 500, AllValid); err != nil {
		t.Fatal(err)
	}
}

// AllValid is a rawstore.Judge that finds everything valid.
func AllValid(items []rawstore.Pending, vs []rawstore.Verdict) error {
	for i := range vs {
		vs[i] = rawstore.Verdict{Valid: true}
	}
	return nil
}

// Garble overwrites size bytes in the middle of the largest file in dir,
// or in its segment log (dir/segments), whose name ends in ext (".seg",
// ".blob", ".sst") and returns its name.
func Garble(t testing.TB, dir, ext string, size int) string {
	t.Helper()
	return GarbleAt(t, dir, ext, size, 0.5)
}

// GarbleAt is Garble at the fraction at of the file (0.5: its middle).
func GarbleAt(t testing.TB, dir, ext string, size int, at float64) string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"+ext))
	if segs, _ := filepath.Glob(filepath.Join(dir, "segments", "*"+ext)); err == nil {
		names = append(names, segs...)
	}
	if err != nil || len(names) == 0 {
		t.Fatalf("no %s file in %s (%v)", ext, dir, err)
	}
	var name string
	var biggest int64
	for _, n := range names {
		if fi, err := os.Stat(n); err == nil && fi.Size() > biggest {
			name, biggest = n, fi.Size()
		}
	}
	if biggest < int64(size) {
		t.Fatalf("%s has %d bytes, fewer than the %d to garble", name, biggest, size)
	}
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	junk := make([]byte, size)
	for i := range junk {
		junk[i] = byte(i*131 + 7)
	}
	if _, err := f.WriteAt(junk, int64(float64(biggest-int64(size))*at)); err != nil {
		t.Fatal(err)
	}
	return name
}

// Verified opens an archive in a new directory holding every copy of the
// fixture items that carries a readable id (as a crawl of a relay serving
// them would), each verified for real (lazyparse): valid events, the
// invalid copies quarantined.
func Verified(t testing.TB, items []testrelay.Item) *rawstore.Store {
	t.Helper()
	s, err := rawstore.Open(rawstore.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	Ingest(t, s, items)
	Verify(t, s)
	return s
}

// Ingest stores the events of items (the frames left out) as one relay's.
func Ingest(t testing.TB, s *rawstore.Store, items []testrelay.Item) {
	t.Helper()
	relay, err := s.RelayIndex("wss://fixture.example")
	if err != nil {
		t.Fatal(err)
	}
	b := &rawstore.Batch{Relay: relay}
	for _, it := range items {
		var id [32]byte
		if !it.Frame && event.DecodeHex32(&id, []byte(it.ID)) == nil {
			b.Events = append(b.Events, rawstore.Copy{ID: id, Raw: bytes.Clone(it.Raw)})
		}
	}
	if _, err := s.Ingest(b); err != nil {
		t.Fatal(err)
	}
}

// Verify verifies everything pending in s for real (lazyparse).
func Verify(t testing.TB, s *rawstore.Store) {
	t.Helper()
	pool, err := lazyparse.New(lazyparse.Options{Store: s, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats(); st.Pending != 0 {
		t.Fatalf("%d pending after verifying", st.Pending)
	}
}
