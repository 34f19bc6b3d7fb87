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
// of a stored event takes (its R key, the relay's counters). Run with
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
			if r > 1 {
				b.Logf("relay %d: tables +%.1f B, R keys +%.1f B per sighting", r,
					float64(tables[r]-tables[r-1])/n, float64(prov[r]-prov[r-1])/n)
			}
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(tables[1]+blobs)/n, "B/event")
		b.ReportMetric(float64(prov[2]-prov[1])/n, "B/2nd-sighting")
		b.ReportMetric(float64(prov[k]-prov[2])/float64((k-2)*n), "B/later-sighting")
		b.ReportMetric(float64(tables[k]-tables[1])/float64((k-1)*n), "table-B/sighting")
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
