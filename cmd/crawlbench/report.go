package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// row is one scenario of the table.
type row struct {
	Scenario    string
	Events      int64
	Elapsed     time.Duration
	CPU         time.Duration // user + system; 0: not measured
	Bytes       int64         // EVENT frame bytes moved, for MB/s; 0: not shown
	PeakRSS     int64         // bytes; 0: not measured (in-process)
	RSS10       int64         // bytes at ~10% of the events
	RSS50       int64         // bytes at ~50% of the events
	RSSEnd      int64         // bytes at the last sample
	Concurrency string
	Stages      stageSplit // CPU profile samples by stage; zero: not profiled
	Written     int64      // bytes written to disk; 0: not measured
	Received    int64      // EVENT frame bytes the archiver received, for written/received
	Disk        diskUse    // the archive on disk at exit; zero: not measured
}

// rate is events per second.
func (r row) rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Events) / r.Elapsed.Seconds()
}

// perCPUSecond is events per second of CPU time.
func (r row) perCPUSecond() float64 {
	if r.CPU <= 0 {
		return 0
	}
	return float64(r.Events) / r.CPU.Seconds()
}

// report is everything crawlbench prints at the end.
type report struct {
	Header []string // lines before the table
	Rows   []row
	Notes  []string     // lines after the table
	Steps  []concChange // the controller's decisions in (c); verbose only
}

// writeReport writes rep as markdown.
func writeReport(w io.Writer, rep report) error {
	var b strings.Builder
	for _, l := range rep.Header {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if len(rep.Header) > 0 {
		b.WriteByte('\n')
	}
	b.WriteString("| scenario | events | seconds | events/s | MB/s | CPU s | events/CPU s | peak RSS MB | RSS@10% MB | RSS@50% MB | RSS@end MB | concurrency |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rep.Rows {
		mbps := "-"
		if r.Bytes > 0 && r.Elapsed > 0 {
			mbps = fmt.Sprintf("%.1f", float64(r.Bytes)/1e6/r.Elapsed.Seconds())
		}
		cpu, perCPU := "-", "-"
		if r.CPU > 0 {
			cpu, perCPU = fmt.Sprintf("%.1f", r.CPU.Seconds()), thousands(int64(r.perCPUSecond()+0.5))
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.Scenario, thousands(r.Events), r.Elapsed.Seconds(), thousands(int64(r.rate()+0.5)), mbps,
			cpu, perCPU, mib(r.PeakRSS), mib(r.RSS10), mib(r.RSS50), mib(r.RSSEnd), r.Concurrency)
	}
	writeStages(&b, rep.Rows)
	if len(rep.Notes) > 0 {
		b.WriteByte('\n')
	}
	for _, l := range rep.Notes {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if len(rep.Steps) > 0 {
		b.WriteString("\nConcurrency decisions of (c), time since start, connections x REQs in flight per connection:\n\n```\n")
		for _, s := range rep.Steps {
			b.WriteString(s.String())
			b.WriteByte('\n')
		}
		b.WriteString("```\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeStages writes, for the rows that were profiled, the CPU per event
// by stage and the disk traffic and use.
func writeStages(b *strings.Builder, rows []row) {
	header := false
	for _, r := range rows {
		if r.Stages.total() <= 0 || r.Events <= 0 {
			continue
		}
		if !header {
			b.WriteString("\n| scenario | CPU µs/event | receive | store | verify | other | written/received | disk B/event | of which WAL |\n")
			b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
			header = true
		}
		perEvent := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/float64(r.Events)) }
		wa := "-"
		if r.Received > 0 && r.Written > 0 {
			wa = fmt.Sprintf("%.2f", float64(r.Written)/float64(r.Received))
		}
		disk, wal := "-", "-"
		if r.Disk.Bytes > 0 {
			disk, wal = thousands(r.Disk.Bytes/r.Events), thousands(r.Disk.WAL/r.Events)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Scenario, perEvent(r.CPU),
			perEvent(r.Stages[stageReceive]), perEvent(r.Stages[stageStore]), perEvent(r.Stages[stageVerify]), perEvent(r.Stages[stageOther]),
			wa, disk, wal)
	}
}

// mib formats a byte count in MiB, "-" for none.
func mib(n int64) string {
	if n <= 0 {
		return "-"
	}
	return strconv.FormatInt((n+1<<19)>>20, 10)
}

// thousands formats n with comma separators: 1,000,000.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// ratio formats a/b, "n/a" when b is zero.
func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}
