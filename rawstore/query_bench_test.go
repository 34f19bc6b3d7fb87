package rawstore_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/filter"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/rawstore/storetest"
)

// BenchmarkQuery builds an archive of 100k valid events (unsigned, judged
// valid by fiat: the indexes do not care) over 30 days, 200 authors (a
// few write most), kinds 1/7/6/0/3/30023 and e, p, t tags, and reports
// the index bytes per event, then times Query by author, kind, tag, time
// window and id, each also through QueryIDs (what serve's NIP-77 reads),
// and the whole archive ("all", the set of a NEG-OPEN with {}).
//
//	go test -run '^$' -bench BenchmarkQuery -benchtime 200x ./rawstore/
//
// QUERY_BENCH_EVENTS=1000000 sets the number of events.
func BenchmarkQuery(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("QUERY_BENCH_EVENTS")); err == nil && v > 0 {
		n = v
	}
	s, err := rawstore.Open(rawstore.Options{Dir: b.TempDir(), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	relay, _ := s.RelayIndex("ws://bench")
	r := rand.New(rand.NewPCG(1, 2))
	authors := make([][32]byte, 200)
	for i := range authors {
		authors[i][0], authors[i][1] = byte(i), 0xab
	}
	words := []string{"nostr", "bitcoin", "zap", "gm", "art", "music", "dev", "news"}
	kinds := []int{1, 1, 1, 1, 1, 1, 7, 7, 6, 0, 3, 30023}
	randHex := func() string {
		var x [32]byte
		for i := range x {
			x[i] = byte(r.Uint32())
		}
		return hex.EncodeToString(x[:])
	}
	var ids [][32]byte
	batch := &rawstore.Batch{Relay: relay}
	for i := range n {
		u := r.Float64()
		e := &event.Event{CreatedAt: 1_700_000_000 - r.Int64N(30*86400), Kind: kinds[r.IntN(len(kinds))],
			PubKey: authors[int(u*u*float64(len(authors)))], Tags: [][]string{}, Content: strings.Repeat("c", 200)}
		switch e.Kind {
		case 1:
			e.Tags = append(e.Tags, []string{"t", words[r.IntN(len(words))]}, []string{"p", randHex()})
		case 6, 7:
			e.Tags = append(e.Tags, []string{"e", randHex()}, []string{"p", randHex()})
		case 3:
			for range 20 {
				e.Tags = append(e.Tags, []string{"p", randHex()})
			}
		case 30023:
			e.Tags = append(e.Tags, []string{"d", fmt.Sprint(i % 50)}, []string{"t", words[r.IntN(len(words))]})
		}
		e.ID, _ = e.ComputeID(nil)
		ids = append(ids, e.ID)
		batch.Events = append(batch.Events, rawstore.Copy{ID: e.ID, Raw: event.AppendJSON(nil, e)})
		if len(batch.Events) == 1000 || i == n-1 {
			if _, err := s.Ingest(batch); err != nil {
				b.Fatal(err)
			}
			batch = &rawstore.Batch{Relay: relay}
		}
	}
	start := time.Now()
	if _, err := s.ScanPending(context.Background(), 1000, storetest.AllValid); err != nil {
		b.Fatal(err)
	}
	scan := time.Since(start)
	db := s.DB()
	if err := db.Compact(context.Background(), []byte{0}, []byte{0xff}, true); err != nil {
		b.Fatal(err)
	}
	idx, _ := db.EstimateDiskUsage([]byte{'I'}, []byte{'J'})
	tIdx, _ := db.EstimateDiskUsage([]byte{'T'}, []byte{'U'})
	all, _ := db.EstimateDiskUsage([]byte{0}, []byte{0xff})
	b.Logf("%d events: indexes %.1f B/event on disk (T id index %.1f, whole archive %.0f); verdicts (and index entries) of all applied in %v",
		n, float64(idx)/float64(n), float64(tIdx)/float64(n), float64(all)/float64(n), scan.Round(time.Millisecond))

	for _, c := range []struct{ name, filter string }{
		{"all", `{}`},
		{"author-limit500", fmt.Sprintf(`{"authors":["%x"],"limit":500}`, authors[20])},
		{"author-kind0", fmt.Sprintf(`{"authors":["%x"],"kinds":[0]}`, authors[20])},
		{"kind7-limit500", `{"kinds":[7],"limit":500}`},
		{"tag-t-limit500", `{"#t":["music"],"limit":500}`},
		{"time-1h", `{"since":1699990000,"until":1699993600}`},
		{"time-1h-kind3", `{"kinds":[3],"since":1699990000,"until":1699993600}`},
		{"ids-10", fmt.Sprintf(`{"ids":["%x","%x","%x","%x","%x","%x","%x","%x","%x","%x"]}`,
			ids[1], ids[10], ids[100], ids[1000], ids[2000], ids[3000], ids[4000], ids[5000], ids[6000], ids[7000])},
	} {
		fs, err := filter.Parse([]byte(c.filter))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			var got int
			for range b.N {
				got = 0
				if err := s.Query(fs, func(*event.Event, []byte) error { got++; return nil }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(got), "events/op")
		})
		b.Run(c.name+"-ids", func(b *testing.B) {
			var got int
			for range b.N {
				got = 0
				if err := s.QueryIDs(fs, func(int64, [32]byte) error { got++; return nil }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(got), "events/op")
		})
	}
}
