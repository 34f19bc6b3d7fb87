//go:build !unix

package bip340

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
