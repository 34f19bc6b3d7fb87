package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/nostr-archiver/archiver/event"
)

// show and stats report deletion requests (the author's own, honoured by
// relays; another key's, not) without applying them, and show says when
// each source first served the event.
func TestShowDeletionsAndFirstSeen(t *testing.T) {
	t.Parallel()
	start := time.Now().Unix()
	dir := t.TempDir()
	alice, _ := btcec.PrivKeyFromBytes(bytes.Repeat([]byte{1}, 32))
	mallory, _ := btcec.PrivKeyFromBytes(bytes.Repeat([]byte{2}, 32))
	sign := func(sk *btcec.PrivateKey, kind int, tags ...[]string) *event.Event {
		e := &event.Event{Kind: kind, CreatedAt: 1_700_000_000, Tags: append([][]string{}, tags...)}
		if err := e.Sign(sk); err != nil {
			t.Fatal(err)
		}
		return e
	}
	note := sign(alice, 1)
	noteID := hex.EncodeToString(note.ID[:])
	own := sign(alice, 5, []string{"e", noteID})
	other := sign(mallory, 5, []string{"e", noteID})
	write := func(name string, evs ...*event.Event) string {
		var b []byte
		for _, e := range evs {
			b = append(event.AppendJSON(b, e), '\n')
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	data := filepath.Join(dir, "a")
	for _, f := range []string{write("one.jsonl", note, own, other), write("two.jsonl", note)} {
		if code, _, stderr, _ := run(t, dir, "import", "--data", data, f); code != 0 {
			t.Fatalf("import %s: exit %d\n%s", f, code, stderr)
		}
	}

	code, stdout, stderr, _ := run(t, dir, "show", "--data", data, "--json", noteID)
	if code != 0 {
		t.Fatalf("show: exit %d\n%s", code, stderr)
	}
	var got struct {
		Sightings []struct {
			Source    string
			FirstSeen int64 `json:"first_seen"`
		}
		Deletions []struct {
			ID       string
			Honoured bool   `json:"honoured_by_relays"`
			Why      string `json:"why_not"`
		} `json:"deletion_requests"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("show --json: %v\n%s", err, stdout)
	}
	if len(got.Sightings) != 2 || got.Sightings[0].Source != "import:one.jsonl" || got.Sightings[1].Source != "import:two.jsonl" {
		t.Fatalf("sightings %+v", got.Sightings)
	}
	for _, s := range got.Sightings {
		if s.FirstSeen < start || s.FirstSeen > time.Now().Unix() {
			t.Errorf("%s first seen at %d, not during the test (from %d)", s.Source, s.FirstSeen, start)
		}
	}
	want := map[string]string{hex.EncodeToString(own.ID[:]): "", hex.EncodeToString(other.ID[:]): "requested by another key"}
	if len(got.Deletions) != 2 {
		t.Fatalf("deletion requests %+v", got.Deletions)
	}
	for _, d := range got.Deletions {
		why, ok := want[d.ID]
		if !ok || d.Honoured != (why == "") || !strings.Contains(d.Why, why) {
			t.Errorf("deletion request %+v", d)
		}
	}

	code, stdout, _, _ = run(t, dir, "show", "--data", data, noteID)
	if code != 0 || !strings.Contains(stdout, "requested by another key, not honoured by relays") || !strings.Contains(stdout, "import:two.jsonl (first seen 20") {
		t.Errorf("show: exit %d\n%s", code, stdout)
	}

	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--filter", "{}"}, 3},
		{[]string{"--filter", "{}", "--honor-deletions"}, 2}, // the note its author asked to delete is left out
		{[]string{"--filter", `{"kinds":[1,5],"limit":2}`, "--honor-deletions"}, 2},
	} {
		code, stdout, stderr, _ := run(t, dir, append([]string{"export", "--data", data}, tc.args...)...)
		if n := strings.Count(stdout, "\n"); code != 0 || n != tc.want || tc.want == 2 && strings.Contains(stdout, `"id":"`+noteID) {
			t.Errorf("export %q: exit %d, %d lines, want %d\n%s%s", tc.args, code, n, tc.want, stdout, stderr)
		}
	}
	if code, _, _, _ := run(t, dir, "export", "--data", data, "--honor-deletions"); code != 2 {
		t.Errorf("--honor-deletions without --filter: exit %d, want 2", code)
	}

	code, stdout, stderr, _ = run(t, dir, "stats", "--data", data, "--json")
	var st struct {
		Events    int64
		Deletions struct {
			Requests int64 `json:"deletion_requests"`
			Deleted  int64 `json:"deletion_requested"`
		}
	}
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil {
		t.Fatalf("stats: exit %d, %v\n%s", code, err, stderr)
	}
	if st.Events != 3 || st.Deletions.Requests != 2 || st.Deletions.Deleted != 1 {
		t.Errorf("stats: %+v, want 3 events (none removed), 2 deletion requests, 1 event its author asked to delete", st)
	}
}
