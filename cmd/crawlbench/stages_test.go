package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

func TestStageOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stack []string // leaf first
		want  stage
	}{
		{"frame read", []string{"runtime.memmove", "github.com/lxzan/gws.(*Conn).readMessage", "github.com/lxzan/gws.(*Conn).ReadLoop"}, stageReceive},
		{"frame scan", []string{"github.com/nostr-archiver/archiver/frame.Parse", "github.com/nostr-archiver/archiver/crawl.(*Conn).OnMessage"}, stageReceive},
		{"commit", []string{"runtime.memmove", "github.com/cockroachdb/pebble/v2.(*DB).Apply", "github.com/nostr-archiver/archiver/rawstore.(*Store).Ingest", "github.com/nostr-archiver/archiver/crawl.(*relayCrawl).commit"}, stageStore},
		{"compaction", []string{"github.com/golang/snappy.encodeBlock", "github.com/cockroachdb/pebble/v2.(*DB).compact"}, stageStore},
		{"verify", []string{"github.com/nostr-archiver/archiver/bip340.(*Verifier).Batch", "github.com/nostr-archiver/archiver/lazyparse.(*Pool).work"}, stageVerify},
		{"verify's store read", []string{"github.com/cockroachdb/pebble/v2.(*Iterator).Next", "github.com/nostr-archiver/archiver/rawstore.(*Store).Scan", "github.com/nostr-archiver/archiver/lazyparse.(*Pool).work"}, stageStore},
		{"gc", []string{"runtime.scanobject", "runtime.gcBgMarkWorker"}, stageOther},
		{"crawl logic", []string{"encoding/json.Marshal", "github.com/nostr-archiver/archiver/crawl.(*relayCrawl).page"}, stageOther},
	} {
		if got := stageOf(tc.stack); got != tc.want {
			t.Errorf("%s: stage %d, want %d", tc.name, got, tc.want)
		}
	}
}

// readStages sums a real profile's samples by stage.
func TestReadStages(t *testing.T) {
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	gws, ingest, gc := fn(1, "github.com/lxzan/gws.(*Conn).ReadLoop"), fn(2, "github.com/nostr-archiver/archiver/rawstore.(*Store).Ingest"), fn(3, "runtime.gcBgMarkWorker")
	loc := func(id uint64, f *profile.Function) *profile.Location {
		return &profile.Location{ID: id, Line: []profile.Line{{Function: f}}}
	}
	lg, li, lc := loc(1, gws), loc(2, ingest), loc(3, gc)
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, Period: 10_000_000,
		Function: []*profile.Function{gws, ingest, gc},
		Location: []*profile.Location{lg, li, lc},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{lg}, Value: []int64{1, 10_000_000}},
			{Location: []*profile.Location{li}, Value: []int64{3, 30_000_000}},
			{Location: []*profile.Location{lc, li}, Value: []int64{2, 20_000_000}}, // GC assist inside ingest
			{Location: []*profile.Location{lc}, Value: []int64{4, 40_000_000}},
		},
	}
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := readStages(path)
	if err != nil {
		t.Fatal(err)
	}
	want := stageSplit{stageReceive: 10 * time.Millisecond, stageStore: 50 * time.Millisecond, stageOther: 40 * time.Millisecond}
	if got != want {
		t.Errorf("stages %v, want %v", got, want)
	}
	if _, err := readStages(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing profile read without error")
	}
}

func TestMeasureDisk(t *testing.T) {
	dir := t.TempDir()
	for name, n := range map[string]int{"000001.log": 64 << 10, "000002.sst": 128 << 10, "sub/000003.blob": 32 << 10} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.Repeat("x", n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	u, err := measureDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	if u.WAL < 64<<10 || u.Bytes < (64+128+32)<<10 || u.Bytes-u.WAL < (128+32)<<10 {
		t.Errorf("disk use %+v, want >= 224 KiB in all, >= 64 KiB of it WAL", u)
	}
}
