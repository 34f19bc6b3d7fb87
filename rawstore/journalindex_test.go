package rawstore

import (
	"math/rand/v2"
	"testing"
)

// The index answers as a map would, through growth, replaced values and
// ids that share every byte but the last (a relay may forge such ids).
func TestJournalIndex(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		shared int // leading bytes every id shares
		repeat int // every repeat-th put is of an id put before
	}{
		{"empty", 0, 0, 0},
		{"random, growing", 5000, 0, 0},
		{"replaced values", 3000, 0, 3},
		{"31 bytes shared", 255, 31, 0},
		{"first 16 bytes shared, replaced", 3000, 16, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.n)))
			x := newJournalIndex(0)
			want := map[[32]byte][eventLenV3]byte{}
			var ids [][32]byte
			for i := range tc.n {
				var id [32]byte
				if tc.repeat > 0 && i%tc.repeat == tc.repeat-1 {
					id = ids[rng.IntN(len(ids))]
				} else {
					for j := range id {
						if j < tc.shared {
							id[j] = 0xab
						} else {
							id[j] = byte(rng.Uint32())
						}
					}
					if tc.shared == 31 {
						id[31] = byte(i)
					}
					ids = append(ids, id)
				}
				var v [eventLenV3]byte
				for j := range v {
					v[j] = byte(rng.Uint32())
				}
				x.put(&id, &v)
				want[id] = v
			}
			if x.len() != len(want) {
				t.Fatalf("len %d, want %d", x.len(), len(want))
			}
			if 4*x.len() > 3*len(x.slots) {
				t.Errorf("%d entries in %d slots: more than three quarters full", x.len(), len(x.slots))
			}
			for id, v := range want {
				if got, ok := x.get(&id); !ok || got != v {
					t.Fatalf("get(%x) = %x, %v; want %x", id, got, ok, v)
				}
			}
			for range 1000 {
				var id [32]byte
				for j := range id {
					id[j] = byte(rng.Uint32())
				}
				if _, ok := want[id]; ok {
					continue
				}
				if _, ok := x.get(&id); ok {
					t.Fatalf("get(%x) found an id never put", id)
				}
			}
		})
	}
	var none *journalIndex
	if _, ok := none.get(&[32]byte{}); ok || none.len() != 0 {
		t.Error("a nil index holds something")
	}
}

func BenchmarkJournalIndexPut(b *testing.B) {
	ids := make([][32]byte, foldEvery)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range ids {
		for j := range ids[i] {
			ids[i][j] = byte(rng.Uint32())
		}
	}
	var v [eventLenV3]byte
	b.Run("index", func(b *testing.B) {
		for b.Loop() {
			x := newJournalIndex(foldEvery)
			for i := range ids {
				x.put(&ids[i], &v)
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		for b.Loop() {
			m := map[[32]byte][eventLenV3]byte{}
			for i := range ids {
				m[ids[i]] = v
			}
		}
	})
}
