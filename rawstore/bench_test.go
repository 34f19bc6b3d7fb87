package rawstore

import (
	"crypto/rand"
	"runtime"
	"testing"
	"time"
)

// BenchmarkIngest measures the write path of the crawl: batches of 500
// new ~600-byte events with their cursor, synced as in production, then
// the same batches again (duplicates cost a lookup, not a write).
func BenchmarkIngest(b *testing.B) {
	for _, tc := range []struct {
		name   string
		noSync bool
	}{{"sync", false}, {"nosync", true}} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir(), NoSync: tc.noSync})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			r, _ := s.RelayIndex("ws://bench")
			const perBatch = 500
			batches := make([][]Copy, 0, 64)
			for i := 0; i < 64; i++ {
				evs := make([]Copy, perBatch)
				for j := range evs {
					rand.Read(evs[j].ID[:])
					evs[j].Raw = make([]byte, 600)
					rand.Read(evs[j].Raw)
				}
				batches = append(batches, evs)
			}
			cursor := map[string][]byte{"job/0/now/g0.0": []byte(`{"cursor":1700000000}`)}
			b.ResetTimer()
			start := time.Now()
			events := 0
			for i := 0; i < b.N; i++ {
				evs := batches[i%len(batches)]
				if i >= len(batches) { // fresh ids so every write is new
					for j := range evs {
						rand.Read(evs[j].ID[:8])
					}
				}
				if _, err := s.Ingest(&Batch{Relay: r, Events: evs, Shards: cursor}); err != nil {
					b.Fatal(err)
				}
				events += len(evs)
			}
			el := time.Since(start)
			b.ReportMetric(float64(events)/el.Seconds(), "events/s")
			b.ReportMetric(float64(events*600)/el.Seconds()/1e6, "MB/s")
			b.StopTimer()
			// Duplicates: re-ingest the last batches.
			start = time.Now()
			dups := 0
			for _, evs := range batches {
				res, err := s.Ingest(&Batch{Relay: r, Events: evs})
				if err != nil {
					b.Fatal(err)
				}
				dups += res.Duplicates
			}
			b.ReportMetric(float64(dups)/time.Since(start).Seconds(), "dups/s")
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heapMB")
		})
	}
}
