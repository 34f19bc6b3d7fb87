package daemon

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap"

	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/rawstore/storetest"
)

// A note is unsaved until its batch is synced, not only until the writer
// took it: /status's unsaved_notes 0 is what a kill -9 may follow (a
// frontier called saved while its write was in flight was lost).
func TestNotesUnsavedUntilSynced(t *testing.T) {
	gate := storetest.NewSyncGate(".log", false)
	store, err := rawstore.Open(rawstore.Options{Dir: "db", FS: errorfs.Wrap(vfs.NewMem(), gate)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	n := &notes{store: store, log: zap.NewNop()}
	n.put(noteDiscovered, "wss://found.example", []byte(`{"how":"nip65"}`))
	gate.Arm()
	flushed := make(chan struct{})
	go func() { defer close(flushed); n.flush() }()
	<-gate.Entered()
	if got := n.unsaved(); got != 1 {
		t.Errorf("while the batch syncs: unsaved() = %d, want 1", got)
	}
	gate.Release()
	<-flushed
	if got := n.unsaved(); got != 0 {
		t.Errorf("after the sync: unsaved() = %d, want 0", got)
	}
	got, err := store.Notes(noteDiscovered)
	if err != nil || string(got["wss://found.example"]) != `{"how":"nip65"}` {
		t.Fatalf("stored notes = %q, %v", got, err)
	}
}
