package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
)

// logLine is what crawlbench reads from one of the archiver's zap JSON
// log lines.
type logLine struct {
	Level    string `json:"level"`
	Msg      string `json:"msg"`
	Change   string `json:"change"`
	Conns    int    `json:"conns"`
	Inflight int    `json:"inflight_per_conn"`
	Events   int64  `json:"events"` // "page" (debug): events on the page
}

// parseLogLine decodes a JSON log line; ok is false for anything else
// (the archiver's closing summary lines are plain text).
func parseLogLine(b []byte) (l logLine, ok bool) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return l, false
	}
	if json.Unmarshal(b, &l) != nil {
		return l, false
	}
	return l, true
}

// concChange is one decision of the archiver's concurrency controller.
type concChange struct {
	At       time.Duration // since the archiver started
	Change   string
	Conns    int
	Inflight int
}

func (c concChange) String() string {
	return fmt.Sprintf("%7.2fs  %dx%d  %s", c.At.Seconds(), c.Conns, c.Inflight, c.Change)
}

// crawlLog collects what the archiver's stderr says while it runs: events
// paged so far (from the debug "page" lines), concurrency changes, and the
// lines a person should see (warnings, errors, the plain-text summary).
type crawlLog struct {
	verbose bool // echo concurrency changes

	mu      sync.Mutex
	paged   int64
	changes []concChange
	notable []string
}

// maxNotable bounds the lines kept for the report of a failed run.
const maxNotable = 50

// add takes one stderr line written at `at` after the start. It returns
// the line to echo to the user, if any.
func (c *crawlLog) add(at time.Duration, b []byte) (echo string) {
	l, ok := parseLogLine(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !ok:
		echo = strings.TrimSpace(string(b))
	case l.Msg == "page":
		c.paged += l.Events
	case l.Msg == "concurrency":
		ch := concChange{At: at, Change: l.Change, Conns: l.Conns, Inflight: l.Inflight}
		c.changes = append(c.changes, ch)
		if c.verbose {
			return "concurrency " + ch.String()
		}
		return ""
	case l.Level != "debug" && l.Level != "info":
		echo = strings.TrimSpace(string(b))
	}
	if echo != "" && len(c.notable) < maxNotable {
		c.notable = append(c.notable, echo)
	}
	return echo
}

// Paged returns the events seen on pages so far (boundary repeats
// included).
func (c *crawlLog) Paged() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paged
}

// Changes returns the controller's decisions in order.
func (c *crawlLog) Changes() []concChange {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]concChange(nil), c.changes...)
}

// Last returns the concurrency the controller settled on, ok false if it
// logged no decision.
func (c *crawlLog) Last() (ch concChange, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.changes) == 0 {
		return ch, false
	}
	return c.changes[len(c.changes)-1], true
}

// Notable returns the lines kept for a person to read.
func (c *crawlLog) Notable() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.notable...)
}
