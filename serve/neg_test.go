package serve_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
	gonegentropy "github.com/nbd-wtf/go-nostr/nip77/negentropy"
	"github.com/nbd-wtf/go-nostr/nip77/negentropy/storage/vector"
	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/negentropy"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/rawstore/storetest"
	"github.com/nostr-archiver/archiver/relayconn"
	"github.com/nostr-archiver/archiver/serve"
	"go.uber.org/zap/zaptest"
)

// seed opens an archive holding every k-th valid event of a (none if
// k is 0), verified.
func seed(t *testing.T, a *archive, k int) *rawstore.Store {
	t.Helper()
	dst, err := rawstore.Open(rawstore.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	if k == 0 {
		return dst
	}
	idx, err := dst.RelayIndex("wss://seed.example")
	if err != nil {
		t.Fatal(err)
	}
	b := &rawstore.Batch{Relay: idx}
	i := 0
	err = a.store.ForEachValid(func(id [32]byte, raw []byte) error {
		if i++; i%k == 0 {
			b.Events = append(b.Events, rawstore.Copy{ID: id, Raw: slices.Clone(raw)})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Ingest(b); err != nil {
		t.Fatal(err)
	}
	storetest.Verify(t, dst)
	return dst
}

func syncFrom(t *testing.T, dst *rawstore.Store, url string) crawl.SyncResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return crawl.Sync(ctx, crawl.SyncOptions{
		Store: dst, Until: -1, Idle: 5 * time.Second, Logger: zaptest.NewLogger(t),
		Dial: relayconn.DialOptions{MaxFrame: 16 << 20, DialTimeout: 5 * time.Second, PingInterval: 30 * time.Second},
	}, url)
}

// `archiver sync` (our NIP-77 client) from a served archive reproduces it
// exactly, fetching only what it lacked; a set over max_sync_events is
// refused as "blocked:" and the client splits the window until it fits.
func TestSyncFromServe(t *testing.T) {
	a := newArchive(t)
	tests := []struct {
		name    string
		every   int // the client already holds every k-th event
		cap     int
		windows int // at least
	}{
		{"empty client", 0, 0, 1},
		{"client holds half", 2, 0, 1},
		{"over max_sync_events", 3, 200, 2}, // the wall (150 in one second) fits
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t, a.store, serve.Options{MaxSyncEvents: tt.cap})
			dst := seed(t, a, tt.every)
			held := len(exportLines(t, dst))
			res := syncFrom(t, dst, srv.URL())
			if res.Outcome != crawl.SyncComplete {
				t.Fatalf("sync: %s: %s", res.Outcome, res.Detail)
			}
			if want := len(a.all) - held; res.Needed != want || res.Fetched != want || res.Have != 0 {
				t.Fatalf("needed %d, fetched %d, have %d; want %d, %d, 0", res.Needed, res.Fetched, res.Have, want, want)
			}
			if res.Windows < tt.windows {
				t.Fatalf("%d windows, want at least %d", res.Windows, tt.windows)
			}
			storetest.Verify(t, dst)
			if want, got := exportLines(t, a.store), exportLines(t, dst); !slices.Equal(got, want) {
				t.Fatalf("the synced copy has %d events, the archive %d (or they differ)", len(got), len(want))
			}
			if again := syncFrom(t, dst, srv.URL()); again.Outcome != crawl.SyncComplete || again.Needed != 0 {
				t.Fatalf("second sync: %s (%s), needed %d", again.Outcome, again.Detail, again.Needed)
			}
		})
	}
}

// go-nostr's negentropy initiator (code we did not write) reconciles
// with serve over a plain WebSocket: it learns exactly the ids it lacks
// and those only it holds; the events it then asks for by id pass
// go-nostr's own JSON decoding and signature check. (go-nostr v0.38.2's
// whole NegentropySync cannot be used in a test: its QueryEvents leaves
// goroutines spinning forever and its Relay races with itself.)
func TestGoNostrNegentropyAgainstServe(t *testing.T) {
	a := newArchive(t)
	srv := start(t, a.store, serve.Options{})
	c := dial(t, srv.URL(), true)
	// The client holds every third archived event and one the archive
	// does not have.
	v := vector.New()
	var wantNeed []string
	for i, e := range a.all {
		if i%3 == 0 {
			v.Insert(nostr.Timestamp(e.CreatedAt), e.ID)
		} else {
			wantNeed = append(wantNeed, e.ID)
		}
	}
	extra := strings.Repeat("ab", 32)
	v.Insert(nostr.Timestamp(a.all[0].CreatedAt), extra)
	v.Seal()
	theirs := gonegentropy.New(v, 4096)
	// Their initiator reports ids on channels, closed when it is done.
	var have, need []string
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for id := range theirs.Haves {
			have = append(have, id)
		}
	}()
	go func() {
		defer wg.Done()
		for id := range theirs.HaveNots {
			need = append(need, id)
		}
	}()
	c.SendRaw([]byte(`["NEG-OPEN","g",{},"` + theirs.Start() + `"]`))
	for rounds := 0; ; rounds++ {
		m := c.NextMsg()
		if m.Label != "NEG-MSG" || rounds > 100 {
			t.Fatalf("round %d: %s", rounds, m.Raw)
		}
		next, err := theirs.Reconcile(m.Str(1))
		if err != nil {
			t.Fatalf("their initiator: %v", err)
		}
		if next == "" {
			break
		}
		c.Send("NEG-MSG", "g", next)
	}
	c.Send("NEG-CLOSE", "g")
	wg.Wait()
	slices.Sort(need)
	slices.Sort(wantNeed)
	if !slices.Equal(have, []string{extra}) || !slices.Equal(need, wantNeed) {
		t.Fatalf("go-nostr has %d and needs %d ids, want 1 and %d", len(have), len(need), len(wantNeed))
	}
	var fetched []string
	for i := 0; i < len(need); i += 100 {
		p := c.Req("ids", map[string]any{"ids": need[i:min(i+100, len(need))]})
		for _, raw := range p.Events {
			var e nostr.Event
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatalf("go-nostr cannot decode %s: %v", raw, err)
			}
			if ok, err := e.CheckSignature(); !ok || err != nil {
				t.Fatalf("go-nostr rejects the signature of %s: %v", e.ID, err)
			}
			fetched = append(fetched, e.ID)
		}
	}
	if slices.Sort(fetched); !slices.Equal(fetched, wantNeed) {
		t.Fatalf("fetched %d of the %d needed events", len(fetched), len(wantNeed))
	}
}

// negOpen is a NEG-OPEN of filter with an initiator over items.
func negOpen(t *testing.T, sub, filter string, items []negentropy.Item) string {
	t.Helper()
	n, err := negentropy.New(negentropy.SortItems(items), 0)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := n.Initiate()
	return `["NEG-OPEN",` + mustJSON(sub) + `,` + filter + `,"` + hex.EncodeToString(first) + `"]`
}

// The protocol's edges, on one connection that outlives every error:
// each message is answered as NIP-77 says, or not at all.
func TestNegMessages(t *testing.T) {
	a := newArchive(t)
	srv := start(t, a.store, serve.Options{MaxSyncEvents: 100, MaxSyncSessions: 2})
	c := dial(t, srv.URL(), true)
	empty := negOpen(t, "s", `{}`, nil)
	tests := []struct {
		name, send string
		want       string // the answer's prefix; "" for none
	}{
		{"set over max_sync_events", empty, `["NEG-ERR","s","blocked: too many records (more than 100)"]`},
		{"small set", negOpen(t, "k", `{"limit":20}`, nil), `["NEG-MSG","k","61`},
		{"bad filter", `["NEG-OPEN","f",{"kind":1},"61"]`, `["NEG-ERR","f","invalid: invalid filter`},
		{"not hex", `["NEG-OPEN","h",{},"zz"]`, `["NEG-ERR","h","invalid: the negentropy message is not hex"]`},
		{"missing message", `["NEG-OPEN","m",{}]`, `["NEG-ERR","m","invalid: NEG-OPEN has 3 elements"]`},
		{"no id", `["NEG-OPEN"]`, `["NOTICE","invalid: NEG-OPEN takes a subscription id`},
		{"malformed negentropy", `["NEG-MSG","k","6101"]`, `["NEG-ERR","k","invalid: negentropy: malformed message`},
		{"after its error", `["NEG-MSG","k","61"]`, `["NEG-ERR","k","closed: no open reconciliation with this id"]`},
		{"other version", negOpen(t, "v", `{"limit":20}`, nil)[:len(`["NEG-OPEN","v",{"limit":20},"`)] + `62"]`, `["NEG-MSG","v","61"]`},
		{"second session", negOpen(t, "w", `{"limit":20}`, nil), `["NEG-MSG","w","61`},
		{"third session", negOpen(t, "x", `{"limit":20}`, nil), `["NEG-ERR","x","error: too many open reconciliations (2)"]`},
		{"close", `["NEG-CLOSE","v"]`, ""},
		{"a slot freed", negOpen(t, "x", `{"limit":20}`, nil), `["NEG-MSG","x","61`},
		{"message after close", `["NEG-CLOSE","x"]`, ""},
		{"closed", `["NEG-MSG","x","61"]`, `["NEG-ERR","x","closed: no open reconciliation with this id"]`},
	}
	for _, tt := range tests {
		c.SendRaw([]byte(tt.send))
		if tt.want == "" {
			continue
		}
		if m := c.NextMsg(); !strings.HasPrefix(string(m.Raw), tt.want) {
			t.Errorf("%s: %s\n got %s\nwant %s...", tt.name, tt.send, m.Raw, tt.want)
		}
	}
	// REQ still works on the connection.
	if p := c.ReqRaw("r", `{"limit":3}`); p.End.Label != "EOSE" || len(p.IDs()) != 3 {
		t.Fatalf("REQ after NIP-77 errors: %d events then %s", len(p.IDs()), p.End.Raw)
	}
}

// A damaged primary replaced by a fresh copy keeps its index entries
// while the copy waits for a verdict: REQ does not serve it, so NEG must
// not list it either, or a syncing client needs ids it can never fetch
// (before: needed 3000, fetched 3000 minus the damaged).
func TestNegListsOnlyServed(t *testing.T) {
	const n = 3000
	dir := t.TempDir()
	storetest.FillWith(t, rawstore.Options{Dir: dir}, "wss://fill.example", n)
	storetest.Garble(t, dir, ".seg", 4096)
	s, err := rawstore.Open(rawstore.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rep, err := s.Check()
	if err != nil || len(rep.DamagedIDs) == 0 {
		t.Fatalf("check: %d damaged ids, %v; want some", len(rep.DamagedIDs), err)
	}
	index := map[[32]byte]int{}
	for i := range n {
		id, _ := storetest.Event(i)
		index[id] = i
	}
	b := &rawstore.Batch{}
	for _, id := range rep.DamagedIDs {
		_, raw := storetest.Event(index[id])
		b.Events = append(b.Events, rawstore.Copy{ID: id, Raw: raw})
	}
	if res, err := s.Ingest(b); err != nil || res.Repaired != len(rep.DamagedIDs) {
		t.Fatalf("re-ingest: %+v, %v; want %d repaired", res, err, len(rep.DamagedIDs))
	}

	srv := start(t, s, serve.Options{})
	res := syncFrom(t, seed(t, nil, 0), srv.URL())
	if want := n - len(rep.DamagedIDs); res.Outcome != crawl.SyncComplete || res.Needed != want || res.Fetched != want {
		t.Fatalf("sync: %s (%s), needed %d, fetched %d; want complete, %d and %d", res.Outcome, res.Detail, res.Needed, res.Fetched, want, want)
	}
}
