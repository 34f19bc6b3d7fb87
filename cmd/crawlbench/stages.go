package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/pprof/profile"
)

// stage names a part of the archiver's work, for the CPU split.
type stage int

const (
	stageReceive stage = iota // WebSocket reads, frame scans
	stageStore                // rawstore and Pebble: lookups, commits, WAL, flushes, compactions
	stageVerify               // parsing and BIP-340 verification
	stageOther                // the rest: crawl logic, Go's scheduler and GC
	numStages
)

// stageMarkers classify a CPU sample by the functions on its stack, the
// first stage in this order with a matching frame winning: a verify
// worker's store read is store work.
var stageMarkers = []struct {
	stage    stage
	prefixes []string
}{
	{stageStore, []string{"github.com/nostr-archiver/archiver/rawstore.", "github.com/cockroachdb/pebble/"}},
	{stageVerify, []string{"github.com/nostr-archiver/archiver/lazyparse.", "github.com/nostr-archiver/archiver/bip340."}},
	{stageReceive, []string{"github.com/lxzan/gws.", "github.com/nostr-archiver/archiver/crawl.(*Conn).", "github.com/nostr-archiver/archiver/frame."}},
}

// stageOf classifies one stack of function names (leaf first).
func stageOf(funcs []string) stage {
	for _, m := range stageMarkers {
		for _, f := range funcs {
			for _, p := range m.prefixes {
				if strings.HasPrefix(f, p) {
					return m.stage
				}
			}
		}
	}
	return stageOther
}

// stageSplit is CPU time by stage, from a CPU profile's samples.
type stageSplit [numStages]time.Duration

func (s stageSplit) total() time.Duration {
	var t time.Duration
	for _, d := range s {
		t += d
	}
	return t
}

// readStages splits the CPU samples of the profile at path by stage.
func readStages(path string) (stageSplit, error) {
	var out stageSplit
	f, err := os.Open(path)
	if err != nil {
		return out, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return out, fmt.Errorf("parse CPU profile %s: %w", path, err)
	}
	col := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			col = i
		}
	}
	if col < 0 {
		return out, fmt.Errorf("CPU profile %s has no cpu/nanoseconds samples", path)
	}
	var funcs []string
	for _, s := range p.Sample {
		funcs = funcs[:0]
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if l.Function != nil {
					funcs = append(funcs, l.Function.Name)
				}
			}
		}
		out[stageOf(funcs)] += time.Duration(s.Value[col])
	}
	return out, nil
}

// diskUse is what an archive directory takes on disk: all of it, and its
// write-ahead logs (which a reopen replays into tables).
type diskUse struct {
	Bytes, WAL int64
}

// measureDisk sums the allocated blocks of the files under dir.
func measureDisk(dir string) (diskUse, error) {
	var u diskUse
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n := info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			n = st.Blocks * 512
		}
		u.Bytes += n
		if strings.HasSuffix(path, ".log") {
			u.WAL += n
		}
		return nil
	})
	return u, err
}
