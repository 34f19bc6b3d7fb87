package bip340

import (
	"testing"

	"github.com/btcsuite/btcd/btcec/v2/schnorr"
)

// measure runs verify b.N times and reports verifies/s against wall time
// and, where available, cpu-verifies/s against the process's CPU time.
func measure(b *testing.B, verify func(i int)) {
	cpu0, ok := processCPU()
	b.ResetTimer()
	for i := range b.N {
		verify(i)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "verifies/s")
	if cpu1, ok1 := processCPU(); ok && ok1 && cpu1 > cpu0 {
		b.ReportMetric(float64(b.N)/(cpu1-cpu0).Seconds(), "cpu-verifies/s")
	}
}

// BenchmarkVerify compares, on one goroutine: btcec's parse+verify (the
// baseline), Verify (no cache: every key is lifted) and KeyCache.Verify
// with 64 repeat authors (every key cached).
func BenchmarkVerify(b *testing.B) {
	sigs := makeSigned(b, "bench", 256, 64)
	b.Run("btcec", func(b *testing.B) {
		measure(b, func(i int) {
			s := &sigs[i%len(sigs)]
			pk, err := schnorr.ParsePubKey(s.pub[:])
			if err != nil {
				b.Fatal(err)
			}
			sig, err := schnorr.ParseSignature(s.sig[:])
			if err != nil {
				b.Fatal(err)
			}
			if !sig.Verify(s.msg[:], pk) {
				b.Fatal("invalid")
			}
		})
	})
	b.Run("Verify", func(b *testing.B) {
		measure(b, func(i int) {
			s := &sigs[i%len(sigs)]
			if err := Verify(&s.pub, &s.msg, &s.sig); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("KeyCache", func(b *testing.B) {
		c := NewKeyCache(0)
		measure(b, func(i int) {
			s := &sigs[i%len(sigs)]
			if err := c.Verify(&s.pub, &s.msg, &s.sig); err != nil {
				b.Fatal(err)
			}
		})
	})
}
