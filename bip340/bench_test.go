package bip340

import (
	"fmt"
	"testing"

	"github.com/btcsuite/btcd/btcec/v2/schnorr"
)

// measure runs verify b.N times, each call checking perCall signatures,
// and reports verifies/s against wall time and, where available,
// cpu-verifies/s against the process's CPU time.
func measure(b *testing.B, perCall int, verify func(i int)) {
	cpu0, ok := processCPU()
	b.ResetTimer()
	for i := range b.N {
		verify(i)
	}
	b.StopTimer()
	n := float64(b.N * perCall)
	b.ReportMetric(n/b.Elapsed().Seconds(), "verifies/s")
	if cpu1, ok1 := processCPU(); ok && ok1 && cpu1 > cpu0 {
		b.ReportMetric(n/(cpu1-cpu0).Seconds(), "cpu-verifies/s")
	}
}

// BenchmarkVerify compares, on one goroutine: btcec's parse+verify (the
// baseline), Verify (no cache: every key is lifted) and KeyCache.Verify
// with 64 repeat authors (every key cached).
func BenchmarkVerify(b *testing.B) {
	sigs := makeSigned(b, "bench", 256, 64)
	b.Run("btcec", func(b *testing.B) {
		measure(b, 1, func(i int) {
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
		measure(b, 1, func(i int) {
			s := &sigs[i%len(sigs)]
			if err := Verify(&s.pub, &s.msg, &s.sig); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("KeyCache", func(b *testing.B) {
		c := NewKeyCache(0)
		measure(b, 1, func(i int) {
			s := &sigs[i%len(sigs)]
			if err := c.Verify(&s.pub, &s.msg, &s.sig); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkVerifyBatch measures VerifyBatch per signature, on one
// goroutine, for batches of valid signatures by distinct authors: cached
// (KeyCache.VerifyBatch, every key cached), uncached (VerifyBatch), and
// cached with one bad signature per batch and with all bad (the cost of
// finding them). Compare with BenchmarkVerify's KeyCache and Verify.
func BenchmarkVerifyBatch(b *testing.B) {
	sigs := makeSigned(b, "bench-batch", 512, 512)
	items := make([]Item, len(sigs))
	for i := range sigs {
		s := &sigs[i]
		items[i] = Item{PubKey: &s.pub, Msg: &s.msg, Sig: &s.sig}
	}
	forged := make([]signed, len(sigs))
	for i := range forged {
		forged[i] = sigs[i]
		forged[i].sig[63] ^= 1
	}
	c := NewKeyCache(0)
	c.VerifyBatch(items, make([]error, len(items)))
	for _, n := range []int{16, 64, 128} {
		errs := make([]error, n)
		batch := make([]Item, n)
		run := func(verify func([]Item, []error), isBad func(j int) bool) func(b *testing.B) {
			return func(b *testing.B) {
				measure(b, n, func(i int) {
					off := i * n % len(items)
					copy(batch, items[off:])
					for j := range batch {
						if isBad(j) {
							f := &forged[off+j]
							batch[j] = Item{PubKey: &f.pub, Msg: &f.msg, Sig: &f.sig}
						}
					}
					verify(batch, errs)
					for j, err := range errs {
						if (err != nil) != isBad(j) {
							b.Fatalf("item %d: %v", j, err)
						}
					}
				})
			}
		}
		none := func(int) bool { return false }
		b.Run(fmt.Sprintf("cached/%d", n), run(c.VerifyBatch, none))
		b.Run(fmt.Sprintf("uncached/%d", n), run(VerifyBatch, none))
		b.Run(fmt.Sprintf("cached-1bad/%d", n), run(c.VerifyBatch, func(j int) bool { return j == n/3 }))
		b.Run(fmt.Sprintf("cached-allbad/%d", n), run(c.VerifyBatch, func(int) bool { return true }))
	}
}
