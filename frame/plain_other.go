//go:build !amd64 || purego

package frame

// plainRun has no vector form here: the caller's 16-byte loop does it all.
func plainRun([]byte, int) (int, bool) { return 0, false }

// hasVector says whether plainRun reads anything (tests).
const hasVector = false
