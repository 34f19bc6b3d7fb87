//go:build !cgo || !linux

package rawstore

// Without cgo Pebble allocates on the Go heap, whose scavenger returns
// freed memory by itself.

func cMallocFree() int64 { return -1 }

func cMallocTrim() {}
