package rawstore

import (
	"testing"

	"go.uber.org/goleak"
)

// Close stops the store's trim loop (and Pebble's goroutines) before it
// returns.
func TestCloseStopsTrimLoop(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if (s.trimStop != nil) != (cMallocFree() >= 0) {
		t.Fatalf("trim loop running %v, C allocator reports free bytes %d", s.trimStop != nil, cMallocFree())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
