package rawstore

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"
)

// BenchmarkSightingBytes measures what provenance costs on disk, apart
// from any crawl state: N events (of ~450 bytes, as signed notes are)
// stored from one relay, then the same N served again by K-1 more relays,
// each as plain event batches. After a flush and a full compaction the
// archive's growth per extra relay, over N, is the bytes one more sighting
// of a stored event takes (its R and H keys, the relay's counters). Run with
// -benchtime=1x (docs/SCHEDULER.md).
func BenchmarkSightingBytes(b *testing.B) {
	const n, k = 20000, 6
	evs := make([]Copy, n)
	for i := range evs {
		var pub [32]byte
		var sig [64]byte
		var content [100]byte
		rand.Read(evs[i].ID[:])
		rand.Read(pub[:])
		rand.Read(sig[:])
		rand.Read(content[:])
		evs[i].Raw = fmt.Appendf(nil, `{"id":"%x","pubkey":"%x","created_at":%d,"kind":1,"tags":[],"content":"%s","sig":"%x"}`,
			evs[i].ID, pub, 1_700_000_000+i, hex.EncodeToString(content[:]), sig)
	}
	for range b.N {
		dir := b.TempDir()
		s, err := Open(Options{Dir: dir, NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		tables := make([]int64, k+1) // .sst bytes: keys, and values kept in line
		prov := make([]uint64, k+1)  // of which R keys (Pebble's estimate)
		sight := make([]uint64, k+1) // and H keys
		var blobs int64              // .seg bytes: event bodies, untouched by later sightings
		for r := 1; r <= k; r++ {
			idx, err := s.RelayIndex(fmt.Sprintf("wss://relay%d.example", r))
			if err != nil {
				b.Fatal(err)
			}
			for lo := 0; lo < n; lo += 500 {
				if _, err := s.Ingest(&Batch{Relay: idx, Events: evs[lo:min(n, lo+500)]}); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.db.Flush(); err != nil {
				b.Fatal(err)
			}
			if err := s.db.Compact(b.Context(), []byte{0}, []byte{0xff}, false); err != nil {
				b.Fatal(err)
			}
			tables[r] = filesBytes(b, dir, ".sst")
			if r == 1 {
				blobs = filesBytes(b, dir, ".seg")
			}
			if prov[r], err = s.db.EstimateDiskUsage([]byte{prefixProven}, []byte{prefixProven + 1}); err != nil {
				b.Fatal(err)
			}
			if sight[r], err = s.db.EstimateDiskUsage([]byte{prefixSighting}, []byte{prefixSighting + 1}); err != nil {
				b.Fatal(err)
			}
			if r > 1 {
				b.Logf("relay %d: tables +%.1f B, R keys +%.1f B, H keys +%.1f B per sighting", r,
					float64(tables[r]-tables[r-1])/n, float64(prov[r]-prov[r-1])/n, float64(sight[r]-sight[r-1])/n)
			}
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(tables[1]+blobs)/n, "B/event")
		b.ReportMetric(float64(prov[2]-prov[1])/n, "B/2nd-sighting")
		b.ReportMetric(float64(prov[k]-prov[2])/float64((k-2)*n), "B/later-sighting")
		b.ReportMetric(float64(tables[k]-tables[1])/float64((k-1)*n), "table-B/sighting")
		b.ReportMetric(float64(sight[k]-sight[1])/float64((k-1)*n), "H-B/sighting")
	}
}

// filesBytes is the size of the archive's files named *ext.
func filesBytes(b *testing.B, dir, ext string) int64 {
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && filepath.Ext(p) == ext {
			info, err := d.Info()
			if err == nil {
				total += info.Size()
			}
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return total
}

// BenchmarkCountServedSmallRelay is the audit of a small relay's pass
// (docs/SCHEDULER.md): CountServed of a relay of 20 events (10 its own,
// 10 served first by the big relay) over [0, OpenTop], in an archive of
// 200,000 events of another relay; "scan" is the count without the
// sighting index (the code before it, and archives from before it).
func BenchmarkCountServedSmallRelay(b *testing.B) {
	const n = 200_000
	s, err := Open(Options{Dir: b.TempDir(), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	big, _ := s.RelayIndex("wss://big.example")
	small, _ := s.RelayIndex("wss://small.example")
	sb := &Batch{Relay: small}
	for lo := 0; lo < n; lo += 1000 {
		bb := &Batch{Relay: big}
		for i := lo; i < lo+1000; i++ {
			ev := id(i)
			c := Copy{ID: ev, Raw: fmt.Appendf(nil, `{"id":"%x","created_at":%d,"kind":1,"content":"%0200d"}`, ev, 1_700_000_000+i, i)}
			if i%(n/10) == 0 {
				sb.Events = append(sb.Events, c)
			}
			bb.Events = append(bb.Events, c)
		}
		if _, err := s.Ingest(bb); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 10 {
		ev := id(n + i)
		sb.Events = append(sb.Events, Copy{ID: ev, Raw: fmt.Appendf(nil, `{"id":"%x","created_at":%d,"kind":1}`, ev, 1_600_000_000+i)})
	}
	if _, err := s.Ingest(sb); err != nil {
		b.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		count func(uint32, uint64, uint64, func([]byte) bool) (int64, error)
	}{{"index", s.countSightings}, {"scan", s.countServedScan}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if got, err := c.count(small, 0, ^uint64(0), nil); err != nil || got != 20 {
					b.Fatalf("%d, %v; want 20", got, err)
				}
			}
		})
	}
}
