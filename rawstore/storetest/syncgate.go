package storetest

import (
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// SyncGate, injected with errorfs.Wrap, holds the first sync of a file
// whose name ends in its suffix, once armed, until Release; Entered is
// closed when that sync waits. Later syncs pass.
type SyncGate struct {
	suffix  string
	armed   atomic.Bool
	entered chan struct{}
	hold    chan struct{}
}

// NewSyncGate returns a gate for the files ending in suffix, armed or not
// yet (Arm).
func NewSyncGate(suffix string, armed bool) *SyncGate {
	g := &SyncGate{suffix: suffix, entered: make(chan struct{}), hold: make(chan struct{})}
	g.armed.Store(armed)
	return g
}

// Arm makes the next sync of a matching file wait.
func (g *SyncGate) Arm() { g.armed.Store(true) }

// Entered is closed once the held sync waits.
func (g *SyncGate) Entered() <-chan struct{} { return g.entered }

// Release lets the held sync go on.
func (g *SyncGate) Release() { close(g.hold) }

func (g *SyncGate) String() string { return "sync gate " + g.suffix }

// MaybeError implements errorfs.Injector: it never fails an operation.
func (g *SyncGate) MaybeError(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		if strings.HasSuffix(op.Path, g.suffix) && g.armed.CompareAndSwap(true, false) {
			close(g.entered)
			<-g.hold
		}
	}
	return nil
}
