package rawstore

import (
	"syscall"
	"unsafe"
)

// adviseHuge asks the kernel to back buf's whole 2 MiB pages with huge
// pages (transparent huge pages in "madvise" mode). A commit group's
// buffer is fresh memory every time (Pebble keeps the last ones until it
// flushes them), and on the VMs measured a page fault cost tens of µs:
// filling 16 MiB of 4 KiB pages was the group's largest cost. The advice
// is only advice: where it is refused nothing changes.
func adviseHuge(buf []byte) {
	const huge = 2 << 20
	if cap(buf) < 2*huge {
		return
	}
	buf = buf[:cap(buf)]
	p := uintptr(unsafe.Pointer(&buf[0]))
	lo := (p + huge - 1) &^ (huge - 1)
	hi := (p + uintptr(len(buf))) &^ (huge - 1)
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(buf[lo-p:hi-p], syscall.MADV_HUGEPAGE)
}
