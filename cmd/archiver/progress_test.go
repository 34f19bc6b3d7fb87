package main

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/crawl"
)

// The ETA is unknown until something supports it, never 0 while shards
// remain, and the larger of the density and shard-pace estimates.
func TestEstimateETA(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       crawl.Progress
		elapsed time.Duration
		want    string // "?" unknown
	}{
		{"first seconds", crawl.Progress{Events: 1000, ShardsDone: 1, ShardsTotal: 32, EstRemaining: 5000}, 2 * time.Second, "?"},
		{"no plan yet", crawl.Progress{}, time.Minute, "?"},
		{"nothing learned", crawl.Progress{ShardsTotal: 32}, time.Minute, "?"},
		// The report of issue 12: the density model saw little, so alone
		// it said 0s at 8 of 32 shards.
		{"model says ~0 at 8/32", crawl.Progress{Events: 80000, ShardsDone: 8, ShardsTotal: 32, EstRemaining: 10}, 40 * time.Second, "2m0s"},
		{"model larger", crawl.Progress{Events: 1000, ShardsDone: 16, ShardsTotal: 32, EstRemaining: 10000}, 10 * time.Second, "1m40s"},
		{"model only", crawl.Progress{Events: 1000, ShardsTotal: 32, EstRemaining: 1000}, 10 * time.Second, "10s"},
		{"tiny but not done", crawl.Progress{Events: 1e6, ShardsTotal: 32, EstRemaining: 1}, 10 * time.Second, "1s"},
		{"done", crawl.Progress{Events: 1000, ShardsDone: 40, ShardsTotal: 40}, 10 * time.Second, "0s"},
	} {
		got := "?"
		if d, ok := estimateETA(tc.p, tc.elapsed); ok {
			got = d.String()
		}
		if got != tc.want {
			t.Errorf("%s: ETA %s, want %s", tc.name, got, tc.want)
		}
	}
}

// Log lines written while a progress line is shown go above it: the line
// is cleared first and drawn again after, never glued to the log line.
func TestConsoleKeepsProgressApart(t *testing.T) {
	var buf bytes.Buffer
	c := &console{out: &buf, tty: true}
	c.setStatus("events 10  ETA ?")
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.Write([]byte(`{"level":"info","msg":"x"}` + "\n"))
		}()
	}
	wg.Wait()
	c.setStatus("")
	out := buf.String()
	if strings.Contains(out, `ETA ?{`) {
		t.Fatalf("a log line glued to the progress line:\n%q", out)
	}
	want := clearLine + `{"level":"info","msg":"x"}` + "\n" + "events 10  ETA ?"
	if n := strings.Count(out, want); n != 20 {
		t.Fatalf("%d of 20 log lines cleared and redrew the progress line:\n%q", n, out)
	}
	if !strings.HasSuffix(out, clearLine) {
		t.Fatalf("the progress line was not removed at the end: %q", out)
	}
}

// auto is console on a terminal and JSON off one and under systemd.
func TestAutoLogFormat(t *testing.T) {
	saved := stderr
	t.Cleanup(func() { stderr = saved })
	for _, tc := range []struct {
		tty     bool
		journal string
		json    bool
	}{{true, "", false}, {false, "", true}, {true, "8:1234", true}} {
		var buf bytes.Buffer
		stderr = &console{out: &buf, tty: tc.tty}
		t.Setenv("JOURNAL_STREAM", tc.journal)
		log, err := newLogger("info", "auto")
		if err != nil {
			t.Fatal(err)
		}
		log.Error("boom")
		line := buf.String()
		if strings.HasPrefix(line, "{") != tc.json || strings.Contains(line, "stacktrace") || strings.Contains(line, ".go:") {
			t.Errorf("tty %v JOURNAL_STREAM %q: %q", tc.tty, tc.journal, line)
		}
	}
}
