package main

import (
	"testing"
	"time"
)

func TestParseVmRSS(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"Name:\tarchiver\nVmPeak:\t  900 kB\nVmRSS:\t  123456 kB\nRssAnon:\t 1 kB\n", 123456 << 10, true},
		{"Name:\tarchiver\nState:\tZ (zombie)\n", 0, false},
		{"VmRSS:\t12 MB\n", 0, false},
		{"VmRSS:\tx kB\n", 0, false},
	} {
		got, ok := parseVmRSS([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseVmRSS(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRSSAt(t *testing.T) {
	s := func(at, rss, paged int64) rssSample {
		return rssSample{At: time.Duration(at) * time.Second, RSS: rss, Paged: paged}
	}
	for _, tc := range []struct {
		name    string
		samples []rssSample
		want    int64
	}{
		{"by events paged", []rssSample{s(1, 10, 0), s(2, 20, 50), s(3, 30, 100), s(4, 40, 900)}, 30},
		{"by time without page logs", []rssSample{s(1, 10, 0), s(5, 20, 0), s(9, 30, 0)}, 20},
		{"never reached", []rssSample{s(1, 10, 5), s(2, 20, 6)}, 20},
		{"no samples", nil, 0},
	} {
		m := &measured{Elapsed: 40 * time.Second, Samples: tc.samples} // 10%: 4 s
		if got := m.rssAt(100, 1000); got != tc.want {
			t.Errorf("%s: rssAt = %d, want %d", tc.name, got, tc.want)
		}
	}
}
