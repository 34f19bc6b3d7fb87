package rawstore_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/rawstore/storetest"
)

// ReadBack over a log with 4 KiB garbled: it names exactly the ids check
// names damaged, for the relay that served them and for AnyRelay, none
// for a relay that served nothing; the store's Damage lists them until
// copies fetched again replace them, and then nothing, with Repaired
// counting them.
func TestReadBack(t *testing.T) {
	t.Parallel()
	const n, url = 1500, "ws://127.0.0.1:1"
	dir := filepath.Join(t.TempDir(), "archive")
	ids := storetest.Fill(t, dir, url, n)
	storetest.Garble(t, dir, ".seg", 4096)

	s, err := rawstore.Open(rawstore.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	relay, err := s.RelayIndex(url)
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.RelayIndex("ws://127.0.0.1:2")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Check()
	if err != nil {
		t.Fatal(err)
	}
	want := map[[32]byte]bool{}
	for _, id := range rep.DamagedIDs {
		want[id] = true
	}
	if len(want) == 0 {
		t.Fatal("check found nothing damaged: the garbling missed the bodies")
	}
	readBack := func(relay uint32) (read int, bad map[[32]byte]bool) {
		t.Helper()
		bad = map[[32]byte]bool{}
		last := uint64(0)
		err := s.ReadBack(context.Background(), relay, 0, math.MaxUint64, func(ts uint64, id [32]byte, ok bool) error {
			if !ids[id] || ts < last {
				t.Fatalf("ReadBack gave %x at %d (after %d): not stored, or out of order", id[:4], ts, last)
			}
			last = ts
			read++
			if !ok {
				bad[id] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return read, bad
	}
	for _, r := range []uint32{relay, rawstore.AnyRelay} {
		read, bad := readBack(r)
		if read != n || len(bad) != len(want) {
			t.Fatalf("ReadBack(relay %d): %d read, %d damaged; want %d and %d", r, read, len(bad), n, len(want))
		}
		for id := range bad {
			if !want[id] {
				t.Errorf("ReadBack calls %x damaged, check does not", id[:4])
			}
		}
	}
	if read, _ := readBack(other); read != 0 {
		t.Errorf("ReadBack of a relay that served nothing read %d events", read)
	}
	var de *rawstore.DamageError
	if err := s.Damage(); !errors.As(err, &de) || de.N != len(want) {
		t.Fatalf("Damage after ReadBack: %v; want %d damaged records", err, len(want))
	}

	// The relay serves the damaged ones again.
	b := &rawstore.Batch{Relay: relay}
	for i := range n {
		if id, raw := storetest.Event(i); want[id] {
			b.Events = append(b.Events, rawstore.Copy{ID: id, Raw: raw})
		}
	}
	res, err := s.Ingest(b)
	if err != nil || res.Repaired != len(want) {
		t.Fatalf("ingest of the damaged ids again: %+v, %v; want %d repaired", res, err, len(want))
	}
	if err := s.Damage(); err != nil || s.Repaired() != len(want) {
		t.Fatalf("after the repair: Damage %v, Repaired %d; want nil and %d", err, s.Repaired(), len(want))
	}
	if read, bad := readBack(relay); read != n || len(bad) != 0 {
		t.Fatalf("ReadBack after the repair: %d read, %d damaged; want %d and none", read, len(bad), n)
	}

	// One ReadBack at a time: a second waits for the first, or for its
	// context.
	inFirst, release := make(chan struct{}), make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		once := false
		firstDone <- s.ReadBack(context.Background(), relay, 0, math.MaxUint64, func(uint64, [32]byte, bool) error {
			if !once {
				once = true
				close(inFirst)
				<-release
			}
			return nil
		})
	}()
	<-inFirst
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.ReadBack(ctx, relay, 0, math.MaxUint64, func(uint64, [32]byte, bool) error {
		t.Error("a second ReadBack ran alongside the first")
		return nil
	}); !errors.Is(err, context.Canceled) {
		t.Errorf("second ReadBack, canceled while the first runs: %v, want context.Canceled", err)
	}
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
}
