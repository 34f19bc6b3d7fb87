package interop

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/rawstore/storetest"
	"github.com/nostr-archiver/archiver/serve"
	"github.com/nostr-archiver/archiver/testrelay"
)

// servedArchive is a verified archive of a fixture (with a wall, and
// invalid copies that must never be served) and its valid events.
func servedArchive(t *testing.T) (*rawstore.Store, []*event.Event) {
	t.Helper()
	f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 77, Events: 600, Authors: 10, Wall: 120, BadSigs: 5, ForgedIDs: 3, CacheDir: fixtureCache()})
	if err != nil {
		t.Fatal(err)
	}
	s := storetest.Verified(t, f.Items)
	var all []*event.Event
	for _, v := range f.Valid {
		e, err := event.Parse(v.Line)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, e)
	}
	// NIP-01 order: newest first, then by id.
	slices.SortFunc(all, func(a, b *event.Event) int {
		return cmp.Or(cmp.Compare(b.CreatedAt, a.CreatedAt), bytes.Compare(a.ID[:], b.ID[:]))
	})
	return s, all
}

// nostr-tools (a client someone else wrote, interop/nostr-client) against
// `archiver serve`: its REQ gets every valid event in NIP-01 order, each
// passing nostr-tools' own signature and filter checks; its COUNT the
// same number; and its NIP-77 client, holding a third of the archive and
// one id the archive lacks, learns exactly the other two thirds and that
// one id.
func TestNostrToolsAgainstServe(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "interop", "nostr-client")
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		t.Fatalf("the client's npm packages are not installed (%v): run .ci/install-interop.sh from the repository root", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found (%v): install Node.js >= 20, then run .ci/install-interop.sh", err)
	}
	s, all := servedArchive(t)
	srv, err := serve.New(s, serve.Options{Addr: "127.0.0.1:0", MaxLimit: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	type item struct {
		ID        string `json:"id"`
		CreatedAt int64  `json:"created_at"`
	}
	var held []item
	var wantEvents, wantNeed []string
	for i, e := range all {
		id := hex.EncodeToString(e.ID[:])
		wantEvents = append(wantEvents, id)
		if i%3 == 0 {
			held = append(held, item{id, e.CreatedAt})
		} else {
			wantNeed = append(wantNeed, id)
		}
	}
	extra := strings.Repeat("ab", 32)
	held = append(held, item{extra, all[0].CreatedAt})
	in, _ := json.Marshal(map[string]any{"url": srv.URL(), "filter": map[string]any{}, "have": held})
	cmd := exec.Command(node, "client.js")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("nostr-tools client: %v\n%s", err, stderr.String())
	}
	var out struct {
		Events, Need, Have []string
		Count              int
		NegClose           string
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("client output of %d bytes: %v\n%s", stdout.Len(), err, stderr.String())
	}
	if !slices.Equal(out.Events, wantEvents) {
		t.Errorf("REQ: nostr-tools got %d events, want the archive's %d in NIP-01 order", len(out.Events), len(wantEvents))
	}
	if out.Count != len(all) {
		t.Errorf("COUNT: nostr-tools got %d, want %d", out.Count, len(all))
	}
	slices.Sort(out.Need)
	slices.Sort(wantNeed)
	if !slices.Equal(out.Need, wantNeed) || !slices.Equal(out.Have, []string{extra}) || out.NegClose != "" {
		t.Errorf("NIP-77: nostr-tools needs %d and has %d ids (closed %q), want %d and 1", len(out.Need), len(out.Have), out.NegClose, len(wantNeed))
	}
}

// fixtureCache is where signed fixtures are kept across tests and runs
// (signing dominates generating one, under -race most of all); "" (sign
// anew) without a cache directory.
func fixtureCache() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "archiver-test-fixtures")
}
