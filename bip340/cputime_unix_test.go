//go:build unix

package bip340

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time the process has used. Benchmarks report
// rates against it as well as against wall time, because on a shared
// machine wall time also counts other tenants' work.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
