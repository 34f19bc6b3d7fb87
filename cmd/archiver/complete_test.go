package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/status"
	"github.com/nostr-archiver/archiver/testrelay"
)

// `archiver crawl` exits 0 only when everything asked for is held and
// proven, else 1 naming why; stats shows each range's proof. Far-future
// events (year 2286) are archived by default; a relay that always drops
// some events from its pages while its COUNT counts them is reported
// unproven, per range, in the exit status, stats and stats --json.
func TestCrawlExitsZeroOnlyWhenProven(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		relay   testrelay.Options
		code    int
		finish  string
		proof   string
		exports bool
	}{
		{"far-future events", testrelay.Options{MaxLimit: 200, SupportCount: true}, 0, crawl.FinishDrained, crawl.ProofCount, true},
		{"events only COUNT sees", testrelay.Options{MaxLimit: 200, SupportCount: true, OmitEvery: 40, OmitForever: true}, 1, crawl.FinishUnproven, crawl.ProofUnproven, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fixture(t, testrelay.FixtureOptions{Seed: 16, Events: 1500, FarFuture: 5})
			r := relay(t, tc.relay, f)
			data := t.TempDir()
			var stderr bytes.Buffer
			cmd := archiver("crawl", "--data", data, r.URL())
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || !strings.Contains(stderr.String(), r.URL()+": "+tc.finish) {
				t.Fatalf("exit %d, want %d with %s:\n%s", code, tc.code, tc.finish, tail(stderr.String()))
			}
			if tc.exports {
				assertExport(t, data, f)
			}
			out, err := archiver("stats", "--data", data, "--json").Output()
			if err != nil {
				t.Fatal(err)
			}
			var rep status.Report
			if err := json.Unmarshal(out, &rep); err != nil || len(rep.Relays) != 1 {
				t.Fatalf("stats --json: %v\n%s", err, out)
			}
			found := false
			for _, c := range rep.Relays[0].Coverage {
				found = found || c.Proof == tc.proof
			}
			if !found {
				t.Errorf("no range proven %q in %+v", tc.proof, rep.Relays[0].Coverage)
			}
			text, err := archiver("stats", "--data", data).Output()
			if err != nil || !strings.Contains(string(text), "range [") || !strings.Contains(string(text), ": "+tc.proof+", held") {
				t.Errorf("stats text lacks the coverage (%v):\n%s", err, text)
			}
		})
	}
}

// A relay serving an event over --max-frame closes every page holding it
// (WebSocket status 1009): the crawl gives up on the relay saying which
// setting to raise, and with it raised archives the relay.
func TestCrawlMaxFrame(t *testing.T) {
	t.Parallel()
	f := fixture(t, testrelay.FixtureOptions{Seed: 16, Events: 300})
	items := slices.Clone(f.Items)
	big := items[150]
	big.Raw = bytes.Replace(big.Raw, []byte(`"content":"`), append([]byte(`"content":"`), bytes.Repeat([]byte("x"), 100<<10)...), 1)
	items[150] = big
	r, err := testrelay.New(testrelay.Options{MaxLimit: 50, SupportCount: true})
	if err != nil {
		t.Fatal(err)
	}
	r.Add(items...)
	t.Cleanup(func() { r.Close() })
	data := t.TempDir()
	for _, tc := range []struct {
		maxFrame string
		code     int
		want     string
	}{
		{"64KiB", 1, "over the largest accepted (65536 bytes)"},
		{"1MiB", 0, r.URL() + ": " + crawl.FinishDrained},
	} {
		code, _, stderr, _ := run(t, "", "crawl", "--data", data, "--max-frame", tc.maxFrame, r.URL())
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Fatalf("--max-frame %s: exit %d, want %d with %q:\n%s", tc.maxFrame, code, tc.code, tc.want, tail(stderr))
		}
	}
}
