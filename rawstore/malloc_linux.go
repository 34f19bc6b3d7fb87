//go:build cgo

package rawstore

/*
#include <malloc.h>

// freeHeld returns the bytes glibc holds free in its arenas, or -1 where
// mallinfo2 (glibc 2.33) is missing.
static long long freeHeld(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
	struct mallinfo2 mi = mallinfo2();
	return (long long)mi.fordblks;
#else
	return -1;
#endif
}
*/
import "C"

// Pebble allocates its block cache and memtables with C's calloc (when
// built with cgo), from whichever OS thread runs the Go code at the time.
// glibc gives threads that contend their own arenas, up to 8 per core,
// and memory freed in one arena is not reused by another: reprocessing a
// 1M-event archive (a 96 MB cache and memtable budget) peaked at 243-272
// MB of RSS; with two arenas at 228-244 MB, as fast.
func init() { C.mallopt(C.M_ARENA_MAX, 2) }

// cMallocFree returns the bytes the C allocator holds free (its arenas'
// free chunks, which count in RSS), or -1 if it cannot tell.
func cMallocFree() int64 { return int64(C.freeHeld()) }

// cMallocTrim returns the C allocator's free pages to the OS.
func cMallocTrim() { C.malloc_trim(0) }
