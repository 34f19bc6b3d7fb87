package main

import (
	"strings"
	"testing"
	"time"
)

func TestWriteReport(t *testing.T) {
	rep := report{
		Header: []string{"header line"},
		Rows: []row{
			{Scenario: "(a) raw", Events: 1_000_000, Elapsed: 4 * time.Second, Bytes: 1_200_000_000, Concurrency: "2x4"},
			{Scenario: "(c) adaptive", Events: 1_000_000, Elapsed: 10 * time.Second, Bytes: 1_200_000_000,
				CPU: 12500 * time.Millisecond, PeakRSS: 200 << 20, RSS10: 150 << 20, RSS50: 152 << 20, RSSEnd: 151 << 20, Concurrency: "2x4 (last of 3 changes)",
				Stages:  stageSplit{stageReceive: 3 * time.Second, stageStore: 7 * time.Second, stageOther: 2 * time.Second},
				Written: 2_400_000_000, Received: 1_200_000_000, Disk: diskUse{Bytes: 900_000_000, WAL: 100_000_000}},
		},
		Notes: []string{"- a note"},
		Steps: []concChange{{At: 1500 * time.Millisecond, Change: "+conn", Conns: 2, Inflight: 2}},
	}
	var b strings.Builder
	if err := writeReport(&b, rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"header line\n\n| scenario | events | seconds | events/s | MB/s | CPU s | events/CPU s | peak RSS MB | RSS@10% MB | RSS@50% MB | RSS@end MB | concurrency |\n",
		"| (a) raw | 1,000,000 | 4.0 | 250,000 | 300.0 | - | - | - | - | - | - | 2x4 |\n",
		"| (c) adaptive | 1,000,000 | 10.0 | 100,000 | 120.0 | 12.5 | 80,000 | 200 | 150 | 152 | 151 | 2x4 (last of 3 changes) |\n",
		"| scenario | CPU µs/event | receive | store | verify | other | written/received | disk B/event | of which WAL |\n",
		"| (c) adaptive | 12.5 | 3.0 | 7.0 | 0.0 | 2.0 | 2.00 | 900 | 100 |\n",
		"\n- a note\n",
		"   1.50s  2x2  +conn\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -12345: "-12,345"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestRatio(t *testing.T) {
	if got := ratio(3, 2); got != "1.50" {
		t.Errorf("ratio(3, 2) = %q", got)
	}
	if got := ratio(3, 0); got != "n/a" {
		t.Errorf("ratio(3, 0) = %q", got)
	}
}
