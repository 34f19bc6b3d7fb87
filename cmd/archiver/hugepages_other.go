//go:build !linux || !cgo

package main

// useHugePages does nothing: the huge page tunable is glibc's.
func useHugePages() {}
