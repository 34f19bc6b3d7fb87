package lazyparse

import (
	"fmt"
	"testing"
	"time"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/nostr-archiver/archiver/bip340"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/rawstore"
)

// BenchmarkVerify measures what the pool does per stored copy (parse,
// recompute the id, verify) on one core, next to the plain btcec
// schnorr.Verify loop as the baseline, over events of 50 authors.
func BenchmarkVerify(b *testing.B) {
	const n, authors = 2000, 50
	keys := make([]*btcec.PrivateKey, authors)
	for i := range keys {
		keys[i], _ = btcec.NewPrivateKey()
	}
	raws := make([][]byte, n)
	evs := make([]*event.Event, n)
	for i := range raws {
		e := &event.Event{CreatedAt: int64(1700000000 + i), Kind: 1, Tags: [][]string{{"t", "bench"}}, Content: fmt.Sprintf("event %d with some content to hash", i)}
		if err := e.Sign(keys[i%authors]); err != nil {
			b.Fatal(err)
		}
		evs[i], raws[i] = e, event.AppendJSON(nil, e)
	}
	report := func(b *testing.B, start time.Time) {
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	}
	b.Run("btcec-baseline", func(b *testing.B) {
		start := time.Now()
		for i := 0; i < b.N; i++ {
			e := evs[i%n]
			pk, _ := schnorr.ParsePubKey(e.PubKey[:])
			sig, _ := schnorr.ParseSignature(e.Sig[:])
			if !sig.Verify(e.ID[:], pk) {
				b.Fatal("invalid")
			}
		}
		report(b, start)
	})
	b.Run("bip340-"+bip340.Backend(), func(b *testing.B) {
		start := time.Now()
		for i := 0; i < b.N; i++ {
			e := evs[i%n]
			if err := bip340.Verify(&e.PubKey, &e.ID, &e.Sig); err != nil {
				b.Fatal(err)
			}
		}
		report(b, start)
	})
	b.Run("judge", func(b *testing.B) {
		// What one pool worker does per copy: parse, recompute the id,
		// and its share of a batch signature check (512 copies, as a
		// 1024-copy step split over two workers).
		const batch = 512
		j := NewJudge(DefaultVerifiers()())
		items := make([]rawstore.Pending, batch)
		vs := make([]rawstore.Verdict, batch)
		start := time.Now()
		for done := 0; done < b.N; done += batch {
			k := min(batch, b.N-done)
			for i := range k {
				e := evs[(done+i)%n]
				items[i] = rawstore.Pending{ID: e.ID, Raw: raws[(done+i)%n]}
			}
			j.Run(items[:k], vs[:k])
			for i := range k {
				if !vs[i].Valid {
					b.Fatal(vs[i].Reason)
				}
			}
		}
		report(b, start)
	})
}
