package negentropy

import (
	"encoding/hex"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nbd-wtf/go-nostr"
	gonegentropy "github.com/nbd-wtf/go-nostr/nip77/negentropy"
	"github.com/nbd-wtf/go-nostr/nip77/negentropy/storage/vector"
)

// Interop with go-nostr's implementation (code we did not write): each
// side as initiator against the other as responder, on random sets, with
// and without frame limits, must yield exactly the expected have/need.

func theirVector(items []Item) *vector.Vector {
	v := vector.New()
	for _, it := range items {
		v.Insert(nostr.Timestamp(it.Timestamp), hex.EncodeToString(it.ID[:]))
	}
	v.Seal()
	return v
}

func decodeIDs(t *testing.T, hexIDs []string) [][32]byte {
	t.Helper()
	out := make([][32]byte, 0, len(hexIDs))
	for _, h := range hexIDs {
		var id [32]byte
		if _, err := hex.Decode(id[:], []byte(h)); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return sortIDs(out)
}

var interopCases = []struct {
	name           string
	n              int
	onlyA, onlyB   float64
	limitA, limitB int
	sameSecond     bool
}{
	{"1% missing", 20000, 0, 0.01, 0, 0, false},
	{"both sides", 10000, 0.05, 0.05, 0, 0, false},
	{"limits", 10000, 0.1, 0.1, 4096, 4096, false},
	{"one second", 3000, 0.02, 0.02, 0, 4096, true},
	{"empty initiator", 2000, 0, 1, 0, 0, false},
	{"empty responder", 2000, 1, 0, 0, 0, false},
}

func TestInteropOursInitiatesTheirsResponds(t *testing.T) {
	for i, c := range interopCases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(i), 11))
			a, b, wantHave, wantNeed := randSets(r, c.n, c.onlyA, c.onlyB, c.sameSecond)
			ours, err := New(a, c.limitA)
			if err != nil {
				t.Fatal(err)
			}
			theirs := gonegentropy.New(theirVector(b), c.limitB)
			msg, _ := ours.Initiate()
			var have, need [][32]byte
			for rounds := 0; msg != nil; rounds++ {
				if rounds > 5000 {
					t.Fatal("no convergence")
				}
				ans, err := theirs.Reconcile(hex.EncodeToString(msg))
				if err != nil {
					t.Fatalf("their responder: %v", err)
				}
				raw, err := hex.DecodeString(ans)
				if err != nil {
					t.Fatal(err)
				}
				if msg, err = ours.Reconcile(raw, &have, &need); err != nil {
					t.Fatalf("our initiator: %v", err)
				}
			}
			if have, need = sortIDs(have), sortIDs(need); !slices.Equal(have, wantHave) || !slices.Equal(need, wantNeed) {
				t.Fatalf("have %d need %d, want have %d need %d", len(have), len(need), len(wantHave), len(wantNeed))
			}
		})
	}
}

func TestInteropTheirsInitiatesOursResponds(t *testing.T) {
	for i, c := range interopCases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(i), 12))
			a, b, wantHave, wantNeed := randSets(r, c.n, c.onlyA, c.onlyB, c.sameSecond)
			theirs := gonegentropy.New(theirVector(a), c.limitA)
			ours, err := New(b, c.limitB)
			if err != nil {
				t.Fatal(err)
			}
			// Their initiator reports ids on channels while it reconciles.
			type result struct{ have, need []string }
			got := make(chan result, 1)
			go func() {
				var res result
				haves, needs := theirs.Haves, theirs.HaveNots
				for haves != nil || needs != nil {
					select {
					case id, ok := <-haves:
						if !ok {
							haves = nil
							continue
						}
						res.have = append(res.have, id)
					case id, ok := <-needs:
						if !ok {
							needs = nil
							continue
						}
						res.need = append(res.need, id)
					}
				}
				got <- res
			}()
			msg := theirs.Start()
			for rounds := 0; msg != ""; rounds++ {
				if rounds > 5000 {
					t.Fatal("no convergence")
				}
				raw, err := hex.DecodeString(msg)
				if err != nil {
					t.Fatal(err)
				}
				ans, err := ours.Respond(raw)
				if err != nil {
					t.Fatalf("our responder: %v", err)
				}
				if msg, err = theirs.Reconcile(hex.EncodeToString(ans)); err != nil {
					t.Fatalf("their initiator: %v", err)
				}
			}
			res := <-got // their channels are closed once Reconcile returned ""
			have, need := decodeIDs(t, res.have), decodeIDs(t, res.need)
			if !slices.Equal(have, wantHave) || !slices.Equal(need, wantNeed) {
				t.Fatalf("have %d need %d, want have %d need %d", len(have), len(need), len(wantHave), len(wantNeed))
			}
		})
	}
}
