package daemon

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap"

	"github.com/nostr-archiver/archiver/rawstore"
)

// walGate holds the archive's log syncs while armed, saying when one
// waits.
type walGate struct {
	armed   atomic.Bool
	entered chan struct{}
	hold    chan struct{}
}

func (g *walGate) String() string { return "wal gate" }

func (g *walGate) MaybeError(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		if strings.HasSuffix(op.Path, ".log") && g.armed.CompareAndSwap(true, false) {
			g.entered <- struct{}{}
			<-g.hold
		}
	}
	return nil
}

// A note is unsaved until its batch is synced, not only until the writer
// took it: /status's unsaved_notes 0 is what a kill -9 may follow (a
// frontier called saved while its write was in flight was lost).
func TestNotesUnsavedUntilSynced(t *testing.T) {
	gate := &walGate{entered: make(chan struct{}), hold: make(chan struct{})}
	store, err := rawstore.Open(rawstore.Options{Dir: "db", FS: errorfs.Wrap(vfs.NewMem(), gate)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	n := &notes{store: store, log: zap.NewNop()}
	n.put(noteDiscovered, "wss://found.example", []byte(`{"how":"nip65"}`))
	gate.armed.Store(true)
	flushed := make(chan struct{})
	go func() { defer close(flushed); n.flush() }()
	<-gate.entered
	if got := n.unsaved(); got != 1 {
		t.Errorf("while the batch syncs: unsaved() = %d, want 1", got)
	}
	close(gate.hold)
	<-flushed
	if got := n.unsaved(); got != 0 {
		t.Errorf("after the sync: unsaved() = %d, want 0", got)
	}
	got, err := store.Notes(noteDiscovered)
	if err != nil || string(got["wss://found.example"]) != `{"how":"nip65"}` {
		t.Fatalf("stored notes = %q, %v", got, err)
	}
}
