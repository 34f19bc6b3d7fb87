package main

import (
	"testing"
	"time"
)

func TestCrawlLog(t *testing.T) {
	lines := []string{
		`{"level":"info","ts":"2025-01-01T00:00:00Z","msg":"concurrency","relay":"ws://x","change":"+conn","conns":2,"inflight_per_conn":2}`,
		`{"level":"debug","msg":"page","shard":"s1","events":500,"cursor":1699999000}`,
		`{"level":"debug","msg":"page","shard":"s2","events":120,"cursor":1699998000}`,
		`{"level":"warn","msg":"page failed; retrying","end":"timeout"}`,
		`{"level":"info","msg":"concurrency","change":"+inflight","conns":2,"inflight_per_conn":3}`,
		`ws://x: drained, 1000 events`,
		`{"level":"info","msg":"opened archive"}`,
		`{not json`,
	}
	for _, verbose := range []bool{false, true} {
		var l crawlLog
		l.verbose = verbose
		var echoed []string
		for i, s := range lines {
			if e := l.add(time.Duration(i)*time.Second, []byte(s)); e != "" {
				echoed = append(echoed, e)
			}
		}
		if got := l.Paged(); got != 620 {
			t.Errorf("Paged = %d, want 620", got)
		}
		ch := l.Changes()
		if len(ch) != 2 || ch[0].Conns != 2 || ch[0].Inflight != 2 || ch[0].Change != "+conn" || ch[1].At != 4*time.Second {
			t.Errorf("Changes = %+v", ch)
		}
		last, ok := l.Last()
		if !ok || last.Conns != 2 || last.Inflight != 3 {
			t.Errorf("Last = %+v, %v", last, ok)
		}
		// The warning, the summary and the garbage line; concurrency
		// changes only when verbose; never debug or info lines.
		want := 3
		if verbose {
			want = 5
		}
		if len(echoed) != want {
			t.Errorf("verbose=%v echoed %q, want %d lines", verbose, echoed, want)
		}
		if n := len(l.Notable()); n != 3 {
			t.Errorf("verbose=%v: %d notable lines, want 3", verbose, n)
		}
	}
}

func TestCrawlLogNoChange(t *testing.T) {
	var l crawlLog
	if _, ok := l.Last(); ok {
		t.Fatal("Last of an empty log reported a change")
	}
}

func TestParseReprocess(t *testing.T) {
	n, d, ok := parseReprocess("verified 1000000 copies in 1m2.5s (16000/s): 1000000 valid, 0 invalid, 0 pending")
	if !ok || n != 1_000_000 || d != 62500*time.Millisecond {
		t.Fatalf("parseReprocess = %d, %v, %v", n, d, ok)
	}
	if _, _, ok := parseReprocess("archive x: 10 events"); ok {
		t.Fatal("parseReprocess accepted another line")
	}
}
