package rawstore

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

// crawlRuns returns journal runs like a 4-shard newest-first crawl's:
// pages of 500 new events, each shard's pages descending in time and
// sharing their boundary second, the shards' commits interleaved.
func crawlRuns() []journalRun {
	rng := rand.New(rand.NewPCG(1, 1))
	var runs []journalRun
	const shards, pages, per = 4, 65, 500
	top := [shards]uint64{}
	for s := range shards {
		top[s] = uint64(1e9 + (s+1)*1e7)
	}
	for range pages {
		for s := range shards {
			v := make([]byte, per*journalEntryLen)
			ts := top[s]
			for i := range per {
				e := v[i*journalEntryLen:]
				for j := range idLen {
					e[j] = byte(rng.Uint32())
				}
				binary.BigEndian.PutUint64(e[idLen+eventLenV3:], ts)
				if rng.IntN(3) == 0 {
					ts--
				}
			}
			top[s] = ts
			sortRun(v)
			runs = addJournal(newJournalIndex(0), runs, v, journalEntryLen)
		}
	}
	return runs
}

// timeOrder puts every timed entry of runs in T key order.
func TestTimeOrder(t *testing.T) {
	runs := crawlRuns()
	got := timeOrder(runs)
	if len(got) != len(runs)*500 {
		t.Fatalf("%d entries of %d", len(got), len(runs)*500)
	}
	for i := 1; i < len(got); i++ {
		if compareTimed(&got[i-1], &got[i]) >= 0 {
			t.Fatalf("entries %d and %d out of order", i-1, i)
		}
	}
}

func BenchmarkTimeOrder(b *testing.B) {
	runs := crawlRuns()
	b.ResetTimer()
	for b.Loop() {
		timeOrder(runs)
	}
}

// sortRun sorts the entries of journal value v by (created_at, id).
func sortRun(v []byte) {
	n := len(v) / journalEntryLen
	es := make([][]byte, n)
	for i := range n {
		es[i] = slices.Clone(v[i*journalEntryLen : (i+1)*journalEntryLen])
	}
	slices.SortFunc(es, func(x, y []byte) int {
		if c := bytes.Compare(x[idLen+eventLenV3:], y[idLen+eventLenV3:]); c != 0 {
			return c
		}
		return bytes.Compare(x[:idLen], y[:idLen])
	})
	for i, e := range es {
		copy(v[i*journalEntryLen:], e)
	}
}
