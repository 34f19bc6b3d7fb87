package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/nostr-archiver/archiver/bip340"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/testrelay"
)

// signed makes a valid event of kind with tags and content.
func signed(t *testing.T, key *bip340.PrivateKey, at int64, kind int, tags [][]string, content string) []byte {
	t.Helper()
	e := event.Event{PubKey: key.PublicKey(), CreatedAt: at, Kind: kind, Tags: tags, Content: content}
	e.ID, _ = e.ComputeID(nil)
	sig, err := key.Sign(&e.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.Sig = sig
	return event.AppendJSON(nil, &e)
}

// relays lists the relays a crawl archived and those the archive's valid
// events name, each once, most named first, private targets left out, and
// nothing an invalid event names.
func TestRelaysDiscovered(t *testing.T) {
	t.Parallel()
	f := fixture(t, testrelay.FixtureOptions{Seed: 21, Events: 300})
	r := relay(t, testrelay.Options{}, f)
	dir := t.TempDir()
	data := filepath.Join(dir, "a")
	if code, _, stderr, _ := run(t, dir, "crawl", "--data", data, r.URL()); code != 0 {
		t.Fatalf("crawl: exit %d\n%s", code, stderr)
	}
	key, err := bip340.NewPrivateKey(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	for _, line := range [][]byte{
		signed(t, key, 1000, 10002, [][]string{{"r", "wss://a.example"}, {"r", "WSS://B.example:443/"}, {"r", "ws://127.0.0.1:1"}}, ""),
		signed(t, key, 1001, 3, nil, `{"wss://a.example":{"read":true},"wss://c.example/":{}}`),
		signed(t, key, 1002, 1, [][]string{{"e", "00", "wss://b.example"}}, "hi"),
	} {
		in.Write(line)
		in.WriteByte('\n')
	}
	forged := signed(t, key, 1003, 10002, [][]string{{"r", "wss://forged.example"}}, "")
	forged = bytes.Replace(forged, []byte(`"content":""`), []byte(`"content":"x"`), 1) // id no longer matches
	in.Write(forged)
	in.WriteByte('\n')
	file := filepath.Join(dir, "lists.jsonl")
	if err := os.WriteFile(file, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr, _ := run(t, dir, "import", "--data", data, file); code != 0 {
		t.Fatalf("import: exit %d\n%s", code, stderr)
	}
	code, stdout, stderr, _ := run(t, dir, "relays", "--data", data, "--json")
	if code != 0 {
		t.Fatalf("relays: exit %d\n%s", code, stderr)
	}
	var got []knownRelay
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("relays --json: %v\n%s", err, stdout)
	}
	type row struct {
		url, state string
		mentions   int
	}
	var rows []row
	hinted := 0
	for _, k := range got {
		m := 0
		if k.Found != nil {
			m = k.Found.Mentions
		}
		if k.URL == "wss://relay.example.com" { // the fixture's own hints
			hinted = m
			continue
		}
		rows = append(rows, row{k.URL, k.State, m})
	}
	if hinted == 0 {
		t.Errorf("the fixture's relay hints are not listed")
	}
	want := []row{{r.URL(), "drained", 0}, {"wss://a.example", "never crawled", 2}, {"wss://b.example", "never crawled", 2}, {"wss://c.example", "never crawled", 1}}
	if len(rows) != len(want) {
		t.Fatalf("relays: %+v\nwant %+v", rows, want)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("relay %d: %+v, want %+v", i, rows[i], want[i])
		}
	}
	if got[0].Events != int64(len(f.Valid)) {
		t.Errorf("crawled relay served %d events first, want %d", got[0].Events, len(f.Valid))
	}
}
