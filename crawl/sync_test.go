package crawl_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
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
	"github.com/nostr-archiver/archiver/testrelay"
	"go.uber.org/zap/zaptest"
)

// theirResponder serves NIP-77 with go-nostr's implementation, so that
// our client is checked against code we did not write.
type theirResponder struct{ n *gonegentropy.Negentropy }

func (t theirResponder) Respond(msg []byte) ([]byte, error) {
	out, err := t.n.Reconcile(hex.EncodeToString(msg))
	if err != nil {
		return nil, err
	}
	return hex.DecodeString(out)
}

func goNostrResponder(items []negentropy.Item, limit int) (testrelay.NegResponder, error) {
	v := vector.New()
	for _, it := range items {
		v.Insert(nostr.Timestamp(it.Timestamp), hex.EncodeToString(it.ID[:]))
	}
	v.Seal()
	return theirResponder{gonegentropy.New(v, limit)}, nil
}

// seedArchive stores every valid event of f except every 100th, as if an
// earlier crawl had missed 1%, and returns the ids left out.
func seedArchive(t *testing.T, a *archive, f *testrelay.Fixture, every int) map[[32]byte]bool {
	t.Helper()
	idx, err := a.store.RelayIndex("wss://seed.example")
	if err != nil {
		t.Fatal(err)
	}
	missing := map[[32]byte]bool{}
	b := &rawstore.Batch{Relay: idx}
	for i, v := range f.Valid {
		if every > 0 && i%every == 0 {
			missing[v.ID] = true
			continue
		}
		b.Events = append(b.Events, rawstore.Copy{ID: v.ID, Raw: v.Line})
	}
	if _, err := a.store.Ingest(b); err != nil {
		t.Fatal(err)
	}
	return missing
}

func (a *archive) sync(t *testing.T, url string) crawl.SyncResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return crawl.Sync(ctx, crawl.SyncOptions{
		Store: a.store, Since: 0, Until: -1, Idle: 2 * time.Second, Logger: zaptest.NewLogger(t),
		Dial: relayconn.DialOptions{MaxFrame: 16 << 20, DialTimeout: 5 * time.Second, PingInterval: 30 * time.Second},
	}, url)
}

// syncRecord is the relay record of url.
func (a *archive) syncRecord(t *testing.T, url string) crawl.RelayRecord {
	t.Helper()
	rels, err := a.store.Relays()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rels {
		if r.URL == url {
			var rec crawl.RelayRecord
			if len(r.Record) > 0 {
				if err := json.Unmarshal(r.Record, &rec); err != nil {
					t.Fatal(err)
				}
			}
			return rec
		}
	}
	t.Fatalf("no record for %s", url)
	return crawl.RelayRecord{}
}

// A relay over NIP-77, each way real relays answer it: the archive missing
// 1% gets exactly the missing ids, and the export is exactly the relay's
// valid set; a relay that refuses NIP-77 is reported unsupported, and a
// second too big for the relay's cap is reported unproven.
func TestSyncModes(t *testing.T) {
	t.Parallel()
	f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 77, Events: 1500, Wall: 600, CacheDir: fixtureCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		opts    testrelay.Options
		outcome string
		detail  string // in the result's Detail
		cap     int    // remembered in the record
		windows int    // at least this many windows
		garble  bool   // 4 KiB of the archive's log garbled first
		cut     bool   // the relay's sets are cut short: windows split, ids fetched again
	}{
		{name: "plain", opts: testrelay.Options{NIP77: true}, outcome: crawl.SyncComplete, windows: 1},
		// The damaged bodies are not offered as held: the relay sends them,
		// and their copies replace the damaged ones.
		{name: "damaged archive", opts: testrelay.Options{NIP77: true}, outcome: crawl.SyncComplete, windows: 1, garble: true},
		{name: "max_limit below 100 ids", opts: testrelay.Options{NIP77: true, MaxLimit: 30}, outcome: crawl.SyncComplete, windows: 1},
		{name: "frame limit", opts: testrelay.Options{NIP77: true, NegFrameLimit: 4096}, outcome: crawl.SyncComplete, windows: 1},
		{name: "go-nostr responder", opts: testrelay.Options{NIP77: true, NegFrameLimit: 4096, NegResponder: goNostrResponder}, outcome: crawl.SyncComplete, windows: 1},
		{name: "cap named", opts: testrelay.Options{NIP77: true, NegMaxRecords: 1000, NegCapInReason: true}, outcome: crawl.SyncComplete, cap: 1000, windows: 4},
		{name: "cap unnamed", opts: testrelay.Options{NIP77: true, NegMaxRecords: 1000}, outcome: crawl.SyncComplete, windows: 4},
		// Windows meet at seconds a strict-bounds relay leaves out of both.
		{name: "strict bounds, cap named", opts: testrelay.Options{NIP77: true, NegMaxRecords: 1000, NegCapInReason: true, SinceExclusive: true, UntilExclusive: true},
			outcome: crawl.SyncComplete, cap: 1000, windows: 4},
		{name: "closed on idle", opts: testrelay.Options{NIP77: true, NegCloseEvery: 2, NegFrameLimit: 4096}, outcome: crawl.SyncComplete, windows: 1},
		{name: "notice only", opts: testrelay.Options{NegNoticeOnly: true}, outcome: crawl.SyncUnsupported, detail: "negentropy disabled"},
		{name: "listed but refused", opts: testrelay.Options{ListNIP77: true}, outcome: crawl.SyncUnsupported, detail: "lists NIP-77"},
		// Sets built from a window's newest 700 events only (khatru over
		// eventstore's MaxLimit): before, the one window "proved" the
		// whole range while the archive still lacked the missing events
		// older than the relay's newest 700.
		{name: "set cut at a query limit", opts: testrelay.Options{NIP77: true, NegCut: 700}, outcome: crawl.SyncComplete, cap: 700, windows: 4, cut: true},
		{name: "wall over the cap", opts: testrelay.Options{NIP77: true, NegMaxRecords: 500, NegCapInReason: true}, outcome: crawl.SyncIncomplete, detail: "cannot be split", cap: 500},
	}
	// Every case starts from a copy of one archive missing 1%, what it
	// holds verified: seeding and verifying it anew in each case was 40%
	// of the test.
	seeded := filepath.Join(t.TempDir(), "seeded")
	seed, err := rawstore.Open(rawstore.Options{Dir: seeded})
	if err != nil {
		t.Fatal(err)
	}
	missing := seedArchive(t, &archive{store: seed}, f, 100)
	(&archive{store: seed}).verify(t)
	if err := seed.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			relay := startRelay(t, c.opts, f.Items)
			dir := t.TempDir()
			if err := os.CopyFS(dir, os.DirFS(seeded)); err != nil {
				t.Fatal(err)
			}
			if c.garble {
				storetest.Garble(t, dir, ".seg", 4096)
			}
			a := openArchiveAt(t, dir)
			damaged := 0
			if c.garble {
				rep, err := a.store.Check()
				if err != nil || rep.Damaged == 0 {
					t.Fatalf("check of the garbled archive: %v, %d damaged; want some", err, rep.Damaged)
				}
				damaged = len(rep.DamagedIDs)
			}
			res := a.sync(t, relay.URL())
			t.Logf("%+v", res)
			if res.Outcome != c.outcome || !strings.Contains(res.Detail, c.detail) {
				t.Fatalf("outcome %q (%s), want %q containing %q", res.Outcome, res.Detail, c.outcome, c.detail)
			}
			rec := a.syncRecord(t, relay.URL())
			if rec.NegCap != c.cap {
				t.Errorf("remembered cap %d, want %d", rec.NegCap, c.cap)
			}
			if c.outcome == crawl.SyncUnsupported {
				if !strings.HasPrefix(rec.NIP77, "refused") {
					t.Errorf("record says NIP-77 %q, want refused", rec.NIP77)
				}
				return
			}
			if res.Windows < c.windows {
				t.Errorf("%d windows, want at least %d", res.Windows, c.windows)
			}
			if c.outcome == crawl.SyncIncomplete {
				// Everything but the wall second is proven.
				w := f.WallAt
				if want := []crawl.NegProof{{Since: 0, Until: w - 1}, {Since: w + 1, Until: -1}}; len(rec.NegProofs) != 2 ||
					rec.NegProofs[0].Until != want[0].Until || rec.NegProofs[1].Since != want[1].Since || rec.NegProofs[1].Until != -1 {
					t.Errorf("proofs %+v, want [0, %d] and [%d, -1]", rec.NegProofs, w-1, w+1)
				}
				return
			}
			if want := len(missing) + damaged; !c.cut && (res.Needed != want || res.Fetched != want || res.Have != 0) {
				t.Errorf("needed %d fetched %d have %d, want %d, %d, 0", res.Needed, res.Fetched, res.Have, want, want)
			}
			if err := a.store.Damage(); err != nil || a.store.Repaired() != damaged {
				t.Errorf("after the sync: damage %v, %d repaired; want none, %d", err, a.store.Repaired(), damaged)
			}
			// Adjacent windows join into one proof of the whole range.
			if len(rec.NegProofs) != 1 || rec.NegProofs[0].Since != 0 || rec.NegProofs[0].Until != -1 || rec.NIP77 != "ok" {
				t.Errorf("record: proofs %+v, nip77 %q; want one over [0, -1]", rec.NegProofs, rec.NIP77)
			}
			a.verify(t)
			assertExactValidSet(t, a, f)
			// Nothing left to fetch the second time.
			if again := a.sync(t, relay.URL()); again.Outcome != crawl.SyncComplete || again.Needed != 0 {
				t.Errorf("second sync: %+v", again)
			}
		})
	}
}

// A wall REQ cannot split (one author, one kind, more than a page) ends
// incomplete over REQ alone (TestFinishReasons); a relay that offers
// NIP-77 lets the crawl finish that second and report drained.
func TestWallFinishedOverNIP77(t *testing.T) {
	checkLeaks(t)
	f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 2, Events: 1500, UnsplittableWall: 700, CacheDir: fixtureCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	relay := startRelay(t, testrelay.Options{MaxLimit: 300, SupportCount: true, NIP77: true}, f.Items)
	a := openArchive(t)
	res := a.crawl(t, crawl.Options{PageTimeout: time.Second}, relay.URL())
	if !res[0].Drained() {
		t.Fatalf("crawl: %v", res[0])
	}
	rec := a.record(t)
	var wall *crawl.WallReport
	for i := range rec.Walls {
		if rec.Walls[i].Second == f.UnsplittableAt {
			wall = &rec.Walls[i]
		}
	}
	if wall == nil || !wall.Complete || !strings.HasSuffix(wall.Method, "+nip77") || wall.Events != f.UnsplittableSize {
		t.Fatalf("wall report %+v, want complete by nip77 with %d events", wall, f.UnsplittableSize)
	}
	a.verify(t)
	assertExactValidSet(t, a, f)
}

// A relay without a negentropy frame limit answers a first sync with every
// id in one message; over the client's frame cap the connection drops, and
// Sync redials with smaller windows until the answers fit.
func TestSyncSplitsOnOversizedAnswer(t *testing.T) {
	checkLeaks(t)
	f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 77, Events: 1500, Wall: 600, CacheDir: fixtureCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	relay := startRelay(t, testrelay.Options{NIP77: true}, f.Items)
	a := openArchive(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := crawl.Sync(ctx, crawl.SyncOptions{
		Store: a.store, Until: -1, Idle: 2 * time.Second, Logger: zaptest.NewLogger(t),
		Dial: relayconn.DialOptions{MaxFrame: 64 << 10, DialTimeout: 5 * time.Second, PingInterval: 30 * time.Second},
	}, relay.URL())
	t.Logf("%+v", res)
	if res.Outcome != crawl.SyncComplete || res.Fetched != len(f.Valid) || res.Windows < 2 {
		t.Fatalf("outcome %s (%s), fetched %d of %d in %d windows", res.Outcome, res.Detail, res.Fetched, len(f.Valid), res.Windows)
	}
	a.verify(t)
	assertExactValidSet(t, a, f)
}

// An archive holding events the relay never had (another relay's) makes
// every window's set lack them; asked for by id, the relay serves none,
// so its set is whole: one window, proven, nothing split. The cut check
// (negCut) must not take an honest relay for one that cuts its sets.
func TestSyncHonestSetNotCut(t *testing.T) {
	t.Parallel()
	f := generate(t, testrelay.FixtureOptions{Seed: 77, Events: 1500})
	other := generate(t, testrelay.FixtureOptions{Seed: 78, Events: 50})
	relay := startRelay(t, testrelay.Options{NIP77: true}, f.Items)
	a := openArchive(t)
	missing := seedArchive(t, a, f, 100)
	idx, err := a.store.RelayIndex("wss://other.example")
	if err != nil {
		t.Fatal(err)
	}
	b := &rawstore.Batch{Relay: idx}
	for _, v := range other.Valid {
		b.Events = append(b.Events, rawstore.Copy{ID: v.ID, Raw: v.Line})
	}
	if _, err := a.store.Ingest(b); err != nil {
		t.Fatal(err)
	}
	res := a.sync(t, relay.URL())
	if res.Outcome != crawl.SyncComplete || res.Windows != 1 || res.Have != len(other.Valid) || res.Fetched != len(missing) {
		t.Fatalf("%+v; want complete in 1 window, have %d, fetched %d", res, len(other.Valid), len(missing))
	}
}

// A crawl of one kind reconciles the range's kind-1 set with the
// archive's every event of the range: the relay's set lacks the other
// kinds, and asked for by id with the job's kinds it serves none of
// them, so its set is whole and the ranges are proven by NIP-77. Asked
// without the kinds, it served them, and a whole set read as one cut
// short: split down to single seconds, nothing proven.
func TestNIP77KindCrawlNotCut(t *testing.T) {
	t.Parallel()
	f := generate(t, testrelay.FixtureOptions{Seed: 79, Events: 1500})
	relay := startRelay(t, testrelay.Options{NIP77: true}, f.Items)
	a := openArchive(t)
	seedArchive(t, a, f, 0) // every kind, as another relay served them
	res := a.crawl(t, crawl.Options{Kinds: []int{1}, PageTimeout: time.Second, Now: clockAt(f.Until)}, relay.URL())
	if !res[0].Drained() || res[0].Proof != crawl.ProofNIP77 {
		t.Fatalf("crawl of kind 1: %v (proof %q), want drained, proven by NIP-77", res[0], res[0].Proof)
	}
}

// A first sync (an empty archive) of a relay whose sets are cut to a
// window's newest 400 events: the archive holds nothing older for the
// set to lack, so the cut shows only as an event the relay serves under
// the oldest its set held. Each window is then asked for again under
// that second, as paging goes on under a page, with the archive's items
// read again: the archive ends with every event. Before, the one window
// said complete with the newest 400; with the items not read again, the
// second a cut fell in was left part missing.
func TestFirstSyncCutSet(t *testing.T) {
	t.Parallel()
	// Five events a second: each cut falls inside a second, part of
	// which the set left out.
	f := generate(t, testrelay.FixtureOptions{Seed: 80, Events: 1500, Since: 1_700_000_000 - 300})
	// It also drops every third event from its REQ pages, for good: the
	// look under a set must not take an empty answer for the end.
	relay := startRelay(t, testrelay.Options{NIP77: true, NegCut: 400, OmitEvery: 3, OmitForever: true}, f.Items)
	a := openArchive(t)
	res := a.sync(t, relay.URL())
	if res.Outcome != crawl.SyncComplete || res.Windows < 4 {
		t.Fatalf("%+v; want complete over at least 4 windows", res)
	}
	a.verify(t)
	assertExactValidSet(t, a, f)
}
