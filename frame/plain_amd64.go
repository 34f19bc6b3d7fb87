//go:build amd64 && !purego

package frame

import "golang.org/x/sys/cpu"

// hasVector says whether plainRun reads anything: plainRunAVX2 needs AVX2.
var hasVector = cpu.X86.HasAVX2

// plainRunAVX2 returns the index of the first byte of p[:n] that is '"',
// '\\' or a control character, or n if there is none; n is a positive
// multiple of 32. It looks at 32 bytes per step.
//
//go:noescape
func plainRunAVX2(p *byte, n int) int

// plainRun returns how many bytes from b[i] on are plain string contents
// (strPlain), and whether a byte that is not ends them; it looks at whole
// 32-byte blocks only, so without stop the caller reads on from b[i+n].
func plainRun(b []byte, i int) (n int, stop bool) {
	m := (len(b) - i) &^ 31
	if !hasVector || m == 0 {
		return 0, false
	}
	n = plainRunAVX2(&b[i], m)
	return n, n < m
}
