package rawstore_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/rawstore/storetest"
)

// BenchmarkDrain measures what verifying a crawl's backlog costs the
// store, the judge finding everything valid: 200,000 queued copies read
// in key order (ScanPending) or in queue order (DrainQueue), the archive
// compacted and reopened first so that nothing is read from memory and no
// compaction of the ingest runs meanwhile. It reports the
// process's CPU (user + system) per copy.
func BenchmarkDrain(b *testing.B) {
	const n = 200_000
	for _, tc := range []struct {
		name  string
		drain func(*rawstore.Store) (int, error)
	}{
		{"key-order", func(s *rawstore.Store) (int, error) {
			return s.ScanPending(context.Background(), 1024, storetest.AllValid)
		}},
		{"queue", func(s *rawstore.Store) (int, error) {
			return s.DrainQueue(context.Background(), 1024, storetest.AllValid)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var cpu time.Duration
			for range b.N {
				b.StopTimer()
				dir := b.TempDir()
				s, err := rawstore.Open(rawstore.Options{Dir: dir})
				if err != nil {
					b.Fatal(err)
				}
				relay, err := s.RelayIndex("ws://bench")
				if err != nil {
					b.Fatal(err)
				}
				batch := &rawstore.Batch{Relay: relay}
				for i := range n {
					id, raw := storetest.Event(i)
					batch.Events = append(batch.Events, rawstore.Copy{ID: id, Raw: raw})
					if len(batch.Events) == 500 || i == n-1 {
						if _, err := s.Ingest(batch); err != nil {
							b.Fatal(err)
						}
						batch = &rawstore.Batch{Relay: relay}
					}
				}
				// Settled, so that no compaction of the ingest runs in the
				// drain's time.
				if err := s.DB().Flush(); err != nil {
					b.Fatal(err)
				}
				if err := s.DB().Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
					b.Fatal(err)
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				if s, err = rawstore.Open(rawstore.Options{Dir: dir}); err != nil {
					b.Fatal(err)
				}
				before := cpuTime()
				b.StartTimer()
				judged, err := tc.drain(s)
				b.StopTimer()
				cpu += cpuTime() - before
				if err != nil || judged != n {
					b.Fatalf("judged %d of %d: %v", judged, n, err)
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "cpu-µs/copy")
		})
	}
}

// cpuTime is the process's user and system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
