package rawstore

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nostr-archiver/archiver/event"
)

// TestVerdictIndexKeys: the index keys a verifier hands over with its
// verdicts (Verdict.Index) are exactly those Apply finds by parsing.
func TestVerdictIndexKeys(t *testing.T) {
	var evs []Copy
	for i := range 50 {
		e := &event.Event{CreatedAt: 1_700_000_000 + int64(i%7), Kind: i % 3,
			Tags:    [][]string{{"t", fmt.Sprint("topic", i%4)}, {"e", fmt.Sprintf("%064x", i)}, {"p", "x"}, {"long-name", "v"}},
			Content: fmt.Sprint("note ", i)}
		e.PubKey[0] = byte(i % 5)
		if i%10 == 9 {
			e.Kind = kindDeletion
		}
		e.ID, _ = e.ComputeID(nil)
		evs = append(evs, Copy{ID: e.ID, Raw: event.AppendJSON(nil, e)})
	}
	indexOf := func(given bool) [][]byte {
		s := openTest(t)
		relay, _ := s.RelayIndex("wss://r")
		mustIngest(t, s, &Batch{Relay: relay, Events: slices.Clone(evs)})
		items, err := s.NextPending(0, 1000)
		if err != nil || len(items) != len(evs) {
			t.Fatalf("%d queued of %d: %v", len(items), len(evs), err)
		}
		vs := make([]Verdict, len(items))
		for i := range items {
			if err := s.Load(&items[i]); err != nil {
				t.Fatal(err)
			}
			vs[i].Valid = true
			if given {
				e, err := event.Parse(items[i].Raw)
				if err != nil {
					t.Fatal(err)
				}
				vs[i].Index = IndexKeys(e)
			}
		}
		if err := s.Apply(items, vs); err != nil {
			t.Fatal(err)
		}
		it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixIndex}, UpperBound: []byte{prefixIndex + 1}})
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		var keys [][]byte
		for it.First(); it.Valid(); it.Next() {
			keys = append(keys, bytes.Clone(it.Key()))
		}
		return keys
	}
	given, parsed := indexOf(true), indexOf(false)
	if len(parsed) < 5*len(evs) {
		t.Fatalf("only %d index keys for %d events", len(parsed), len(evs))
	}
	if !slices.EqualFunc(given, parsed, bytes.Equal) {
		t.Fatalf("index keys from the verdicts (%d) differ from those parsed (%d)", len(given), len(parsed))
	}
}
