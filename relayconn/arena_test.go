package relayconn

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// Each copy holds its bytes until release, whatever the sizes around it,
// and none shares memory with the source or a neighbour (an append to one
// cannot reach the next); release lets go of every chunk.
func TestArenaCopies(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 3 {
		var a rawArena
		var want, got [][]byte
		for range 2000 {
			n := rng.IntN(3000)
			if rng.IntN(50) == 0 {
				n = arenaLarge + rng.IntN(arenaChunk) // its own allocation
			}
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			c := a.copy(b)
			want, got = append(want, bytes.Clone(b)), append(got, c)
			clear(b) // the WebSocket buffer is reused: the copy must not be it
			if n < arenaLarge && cap(c) != len(c) {
				t.Fatalf("round %d: a copy of %d bytes has capacity %d: an append would write over its neighbour", round, len(c), cap(c))
			}
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("round %d: copy %d (%d bytes) changed before release", round, i, len(want[i]))
			}
		}
		if len(a.chunks) < 2 {
			t.Fatalf("round %d: %d chunks for ~3 MB: the test does not cross chunks", round, len(a.chunks))
		}
		a.release()
		if a.chunks != nil || a.cur != nil {
			t.Fatalf("round %d: released arena still holds chunks", round)
		}
	}
}
