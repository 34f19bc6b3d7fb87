package main

import "strings"

// hugePagesTunable is the glibc tunable that backs malloc's large mappings
// with transparent huge pages (glibc 2.35+; older ones ignore it). Pebble
// allocates its memtables and block cache with C's calloc (when built with
// cgo), and on the VMs measured a 4 KiB page fault cost tens of µs: a 1M-
// event crawl took 155k faults and 23.4 CPU-s without it, 31k and 20.6 with
// it (docs/PERFORMANCE.md).
const hugePagesTunable = "glibc.malloc.hugetlb"

// withHugePages returns GLIBC_TUNABLES value v asking for huge pages, and
// false if v already says something about them (an operator's
// glibc.malloc.hugetlb=0 stands).
func withHugePages(v string) (string, bool) {
	for _, t := range strings.Split(v, ":") {
		if strings.HasPrefix(t, hugePagesTunable+"=") {
			return v, false
		}
	}
	if v == "" {
		return hugePagesTunable + "=1", true
	}
	return v + ":" + hugePagesTunable + "=1", true
}
