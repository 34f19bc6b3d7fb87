package frame

import "testing"

// TestPlainRun holds the vector run to strPlain: every byte value at every
// position of blocks of one to three 32-byte steps, and a start anywhere.
func TestPlainRun(t *testing.T) {
	want := func(b []byte, i int) (int, bool) {
		m := (len(b) - i) &^ 31
		for n := range m {
			if !strPlain[b[i+n]] {
				return n, true
			}
		}
		return m, false
	}
	b := make([]byte, 100)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	for _, start := range []int{0, 1, 31, 33, 60, 68, 69, 99} {
		for pos := start; pos < len(b); pos++ {
			for c := range 256 {
				saved := b[pos]
				b[pos] = byte(c)
				n, stop := plainRun(b, start)
				wn, wstop := want(b, start)
				// Without the vector form plainRun reads nothing: the
				// scalar loops do it all.
				if (n != wn || stop != wstop) && (hasVector || n != 0 || stop) {
					t.Fatalf("start %d, byte %#x at %d: plainRun = %d, %v, want %d, %v", start, c, pos, n, stop, wn, wstop)
				}
				b[pos] = saved
			}
		}
	}
}
