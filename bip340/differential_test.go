package bip340

import (
	"math/rand/v2"
	"testing"
)

// TestDifferential checks Verify and KeyCache.Verify against btcec on
// valid signatures and on copies with one bit flipped in the message, the
// signature or the key, plus out-of-range and random inputs.
func TestDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cache := NewKeyCache(64)
	check := func(what string, s signed) {
		t.Helper()
		want := refVerify(&s.pub, s.msg[:], &s.sig)
		for name, err := range map[string]error{
			"Verify":   Verify(&s.pub, &s.msg, &s.sig),
			"KeyCache": cache.Verify(&s.pub, &s.msg, &s.sig),
		} {
			if got := sentinel(t, err); got != want {
				t.Fatalf("%s %s(%x, %x, %x) = %v, btcec says %v", what, name, s.pub, s.msg, s.sig, err, want)
			}
		}
	}
	counts := map[error]int{}
	for _, s := range makeSigned(t, "differential", iterations(150, 40), 40) {
		if err := refVerify(&s.pub, s.msg[:], &s.sig); err != nil {
			t.Fatalf("btcec rejects its own signature: %v", err)
		}
		check("valid", s)

		m := s
		m.msg[rng.IntN(32)] ^= 1 << rng.IntN(8)
		check("msg bit flip", m)

		for range 2 {
			m = s
			m.sig[rng.IntN(64)] ^= 1 << rng.IntN(8)
			check("sig bit flip", m)
		}

		m = s
		m.pub[rng.IntN(32)] ^= 1 << rng.IntN(8)
		check("key bit flip", m)
		counts[refVerify(&m.pub, m.msg[:], &m.sig)]++

		// r, s and the key pushed to or past their bounds.
		m = s
		copy(m.sig[:32], fieldPrime[:])
		m.sig[31] += byte(rng.IntN(3))
		check("r >= p", m)
		m = s
		copy(m.sig[32:], curveOrder[:])
		m.sig[63] += byte(rng.IntN(3))
		check("s >= n", m)
		m = s
		copy(m.pub[:], fieldPrime[:])
		m.pub[31] += byte(rng.IntN(3))
		check("x >= p", m)

		// Random keys: about half are not x coordinates on the curve.
		m = s
		for i := range m.pub {
			m.pub[i] = byte(rng.Uint32())
		}
		check("random key", m)
		counts[refVerify(&m.pub, m.msg[:], &m.sig)]++
	}
	// The random keys must have exercised both the bad-key and the
	// does-not-verify paths, or the comparison above proved little.
	if counts[ErrBadPubKey] == 0 || counts[ErrInvalidSignature] == 0 {
		t.Fatalf("random keys hit %v", counts)
	}
}
