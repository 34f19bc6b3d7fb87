package bip340

import (
	"testing"
)

// FuzzVerify cross-checks Verify and KeyCache.Verify against btcec on
// arbitrary inputs. The input is pubkey || msg || sig (128 bytes; shorter
// inputs are zero-padded, longer ones truncated) so that every mutation is
// a usable triple. Seeds are valid signatures and the official vectors
// with 32-byte messages; mutations of valid signatures explore the
// near-valid space that random bytes never reach.
func FuzzVerify(f *testing.F) {
	for _, s := range makeSigned(f, "fuzz", 8, 4) {
		f.Add(append(append(s.pub[:], s.msg[:]...), s.sig[:]...))
	}
	for _, v := range loadVectors(f) {
		if len(v.msg) == 32 {
			f.Add(append(append(v.pubKey[:], v.msg...), v.sig[:]...))
		}
	}
	cache := NewKeyCache(16)
	f.Fuzz(func(t *testing.T, data []byte) {
		var in [128]byte
		copy(in[:], data)
		pub, msg, sig := (*[32]byte)(in[:32]), (*[32]byte)(in[32:64]), (*[64]byte)(in[64:])
		want := refVerify(pub, msg[:], sig)
		if got := sentinel(t, Verify(pub, msg, sig)); got != want {
			t.Fatalf("Verify = %v, btcec says %v", got, want)
		}
		if got := sentinel(t, cache.Verify(pub, msg, sig)); got != want {
			t.Fatalf("KeyCache.Verify = %v, btcec says %v", got, want)
		}
	})
}
