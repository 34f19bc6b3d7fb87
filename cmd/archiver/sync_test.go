package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nostr-archiver/archiver/testrelay"
)

// archiver sync: 0 only when the relay's range is proven held, 1 naming
// why not, 2 for usage errors (before any archive is created).
func TestSyncCommand(t *testing.T) {
	t.Parallel()
	f := fixture(t, testrelay.FixtureOptions{Seed: 78, Events: 1500})
	good := relay(t, testrelay.Options{NIP77: true}, f)
	refusing := relay(t, testrelay.Options{NegNoticeOnly: true}, f)
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no relay", []string{"sync", "--data", "u"}, 2, "no relay given"},
		{"bad url", []string{"sync", "--data", "u", "ws://127.0.0.1:99999"}, 2, ""},
		{"until before since", []string{"sync", "--data", "u", "--since", "10", "--until", "5", good.URL()}, 2, "before --since"},
		{"empty archive", []string{"sync", "--data", "a", good.URL()}, 0, "complete: 1 windows"},
		{"again: nothing needed", []string{"sync", "--data", "a", good.URL()}, 0, "needed 0, fetched 0"},
		{"refused", []string{"sync", "--data", "a", refusing.URL()}, 1, "unsupported"},
		// The audit reconciles every range over NIP-77: no second check.
		{"crawl, proven over NIP-77", []string{"crawl", "--data", "c", good.URL()}, 0, "drained, every range reconciled over NIP-77"},
		// Again: the new seconds since are audited, or (within the same
		// second) nothing was paged and the whole-range check runs.
		{"crawl again", []string{"crawl", "--data", "c", good.URL()}, 0, ": drained"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr, _ := run(t, dir, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit %d, want %d with %q\n%s", code, tc.code, tc.stderr, stderr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "u")); err == nil {
		t.Error("a refused command created its archive")
	}
	assertExport(t, filepath.Join(dir, "a"), f)
	_, stdout, _, _ := run(t, dir, "stats", "--data", "a")
	if !strings.Contains(stdout, "proven complete by NIP-77 over [0, no bound]") || !strings.Contains(stdout, "NIP-77 refused") {
		t.Errorf("stats does not show the proof and the refusal:\n%s", stdout)
	}
}
