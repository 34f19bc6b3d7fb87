package main

import "testing"

func TestWithHugePages(t *testing.T) {
	for _, c := range []struct {
		in, out string
		changed bool
	}{
		{"", "glibc.malloc.hugetlb=1", true},
		{"glibc.malloc.arena_max=2", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1", true},
		{"glibc.malloc.hugetlb=0", "glibc.malloc.hugetlb=0", false},
		{"glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2", false},
	} {
		if out, changed := withHugePages(c.in); out != c.out || changed != c.changed {
			t.Errorf("withHugePages(%q) = %q, %v; want %q, %v", c.in, out, changed, c.out, c.changed)
		}
	}
}
