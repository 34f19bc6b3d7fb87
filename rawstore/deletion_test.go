package rawstore_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/filter"
	"github.com/nostr-archiver/archiver/rawstore"
)

// deletionCorpus is a store holding deletion requests of every kind NIP-09
// tells apart, and the names of its events.
type deletionCorpus struct {
	store *rawstore.Store
	ids   map[string][32]byte
	names map[[32]byte]string
}

func newDeletionCorpus(t *testing.T) *deletionCorpus {
	t.Helper()
	alice, _ := btcec.PrivKeyFromBytes(bytes.Repeat([]byte{1}, 32))
	mallory, _ := btcec.PrivKeyFromBytes(bytes.Repeat([]byte{2}, 32))
	pub := func(sk *btcec.PrivateKey) string {
		var e event.Event
		_ = e.Sign(sk)
		return hex.EncodeToString(e.PubKey[:])
	}
	c := &deletionCorpus{ids: map[string][32]byte{}, names: map[[32]byte]string{}}
	var evs []rawstore.Copy
	add := func(name string, sk *btcec.PrivateKey, kind int, at int64, tags ...[]string) {
		t.Helper()
		e := &event.Event{Kind: kind, CreatedAt: at, Tags: append([][]string{}, tags...), Content: name}
		if err := e.Sign(sk); err != nil {
			t.Fatal(err)
		}
		raw := event.AppendJSON(nil, e)
		if strings.HasPrefix(name, "forged") {
			e.Sig[0] ^= 1
			raw = event.AppendJSON(nil, e)
		}
		c.ids[name], c.names[e.ID] = e.ID, name
		evs = append(evs, rawstore.Copy{ID: e.ID, Raw: raw})
	}
	ref := func(name string) []string { id := c.ids[name]; return []string{"e", hex.EncodeToString(id[:])} }
	list := "30000:" + pub(alice) + ":list"
	add("a1", alice, 1, 1000)
	add("a2", alice, 1, 1001)
	add("m1", mallory, 1, 1002)
	add("list-v1", alice, 30000, 1100, []string{"d", "list"})
	add("list-v2", alice, 30000, 1200, []string{"d", "list"})
	add("list-v3", alice, 30000, 1300, []string{"d", "list"})
	add("other-list", alice, 30000, 1100, []string{"d", "other"})
	add("profile", alice, 0, 1100)
	add("del-own", alice, 5, 2000, ref("a1"), ref("m1")) // a1 deleted; m1 is not alice's
	add("del-other", mallory, 5, 2001, ref("a2"))        // not mallory's
	add("del-list", alice, 5, 1250, []string{"a", list}) // v1 and v2, not v3
	add("del-del", alice, 5, 2002, ref("del-own"))       // no effect
	add("del-profile", alice, 5, 2003, []string{"a", "0:" + pub(alice) + ":"})
	add("del-list-other", mallory, 5, 3000, []string{"a", list}) // not mallory's
	add("forged-del", alice, 5, 2004, ref("a2"))                 // bad signature: never counts

	s, err := rawstore.Open(rawstore.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	relay, _ := s.RelayIndex("wss://r")
	if _, err := s.Ingest(&rawstore.Batch{Relay: relay, Events: evs}); err != nil {
		t.Fatal(err)
	}
	c.store = s
	verifyAll(t, c.store)
	return c
}

// deleted is DeletedIDs by name.
func (c *deletionCorpus) deleted(t *testing.T) ([]string, error) {
	t.Helper()
	ids, err := c.store.DeletedIDs()
	var names []string
	for id := range ids {
		names = append(names, c.names[id])
	}
	slices.Sort(names)
	return names, err
}

func TestDeletionRequests(t *testing.T) {
	c := newDeletionCorpus(t)
	for _, tc := range []struct {
		target string
		want   map[string]string // request -> "honoured" or words of why not
	}{
		{"a1", map[string]string{"del-own": "honoured"}},
		{"m1", map[string]string{"del-own": "another key"}},
		{"a2", map[string]string{"del-other": "another key"}}, // forged-del is not listed
		{"list-v1", map[string]string{"del-list": "honoured", "del-list-other": "another key"}},
		{"list-v2", map[string]string{"del-list": "honoured", "del-list-other": "another key"}},
		{"list-v3", map[string]string{"del-list": "made before", "del-list-other": "another key"}},
		{"other-list", map[string]string{}},
		{"profile", map[string]string{"del-profile": "honoured"}},
		{"del-own", map[string]string{"del-del": "cannot itself"}},
	} {
		t.Run(tc.target, func(t *testing.T) {
			h, err := c.store.Lookup(c.ids[tc.target])
			if err != nil {
				t.Fatal(err)
			}
			e, err := event.Parse(h.Primary)
			if err != nil {
				t.Fatal(err)
			}
			reqs, err := c.store.DeletionRequests(e)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, r := range reqs {
				got[c.names[r.ID]] = "honoured"
				if !r.Honoured {
					got[c.names[r.ID]] = r.Why
				}
			}
			if len(got) != len(reqs) || len(got) != len(tc.want) {
				t.Fatalf("requests %q, want %q", got, tc.want)
			}
			for name, why := range tc.want {
				if !strings.Contains(got[name], why) {
					t.Fatalf("requests %q, want %q", got, tc.want)
				}
			}
		})
	}
}

// TestDeletionCounts: what stats says, and that the index comes back the
// three ways an archive gets it: reprocess --index on an archive indexed
// before it, a full index build, and reprocess --all.
func TestDeletionCounts(t *testing.T) {
	c := newDeletionCorpus(t)
	want := []string{"a1", "list-v1", "list-v2", "profile"}
	check := func(how string) {
		t.Helper()
		got, err := c.deleted(t)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s: deleted %q, %v; want %q", how, got, err, want)
		}
		n, err := c.store.Deletions()
		if err != nil || n.Requests != 6 || n.Deleted != int64(len(want)) {
			t.Fatalf("%s: counts %+v, %v", how, n, err)
		}
	}
	check("indexed with the verdicts")

	if err := c.store.DropDeletionIndex(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.store.DeletedIDs(); !errors.Is(err, rawstore.ErrDeletionsNotIndexed) {
		t.Fatalf("without the deletion index: %v", err)
	}
	if _, err := c.store.BuildIndexes(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	check("built from the kind index")

	if err := c.store.DropIndexes(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.store.BuildIndexes(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	check("built with every index")

	if _, err := c.store.ResetVerdicts(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.deleted(t); err != nil || len(got) != 0 {
		t.Fatalf("after reset, before verifying: %q, %v", got, err)
	}
	verifyAll(t, c.store)
	check("verified again")
}

// TestQueryExceptDeleted: the events left out do not count toward a
// limit, as with a relay that dropped them.
func TestQueryExceptDeleted(t *testing.T) {
	c := newDeletionCorpus(t)
	deleted, err := c.store.DeletedIDs()
	if err != nil {
		t.Fatal(err)
	}
	var alice [32]byte
	h, _ := c.store.Lookup(c.ids["a1"])
	if e, err := event.Parse(h.Primary); err == nil {
		alice = e.PubKey
	}
	names := func(q func([]filter.Filter, func(*event.Event, []byte) error) error, f string) []string {
		t.Helper()
		fs, err := filter.Parse([]byte(f))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		if err := q(fs, func(e *event.Event, _ []byte) error { out = append(out, c.names[e.ID]); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	all := names(c.store.Query, fmt.Sprintf(`{"authors":["%x"]}`, alice))
	var kept []string
	for _, n := range all {
		if _, gone := deleted[c.ids[n]]; !gone {
			kept = append(kept, n)
		}
	}
	except := func(fs []filter.Filter, fn func(*event.Event, []byte) error) error {
		return c.store.QueryExcept(false, deleted, fs, fn)
	}
	for _, limit := range []int{1, 6, 8, 100} { // 6 and 8 reach past deleted events
		got := names(except, fmt.Sprintf(`{"authors":["%x"],"limit":%d}`, alice, limit))
		if want := kept[:min(limit, len(kept))]; !slices.Equal(got, want) {
			t.Errorf("limit %d: %q, want %q (all: %q)", limit, got, want, all)
		}
	}
	if len(kept) == len(all) || len(kept) < 4 {
		t.Fatalf("corpus: %d of alice's %d events kept", len(kept), len(all))
	}
}
