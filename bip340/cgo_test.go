//go:build libsecp256k1

package bip340

import "testing"

func TestBackend(t *testing.T) {
	if b := Backend(); b != "libsecp256k1" {
		t.Fatalf("Backend() = %q with -tags libsecp256k1", b)
	}
}
