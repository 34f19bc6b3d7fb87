//go:build cgo

package rawstore

// #include <malloc.h>
import "C"

// Pebble allocates its block cache and memtables with C's calloc (when
// built with cgo), from whichever OS thread runs the Go code at the time.
// glibc gives threads that contend their own arenas, up to 8 per core,
// and memory freed in one arena is not reused by another: reprocessing a
// 1M-event archive (a 96 MB cache and memtable budget) peaked at 243-272
// MB of RSS; with two arenas at 228-244 MB, as fast.
func init() { C.mallopt(C.M_ARENA_MAX, 2) }
