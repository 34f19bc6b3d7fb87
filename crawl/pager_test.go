package crawl

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/rawstore/storetest"
	"github.com/nostr-archiver/archiver/relayconn"
	"github.com/nostr-archiver/archiver/shard"
	"go.uber.org/zap"
)

// pagerCrawl is a relay crawl of one shard [1000, 2000] over a store
// whose first segment sync g holds.
func pagerCrawl(t *testing.T, g *storetest.SyncGate) (*relayCrawl, shard.Shard) {
	t.Helper()
	st, err := rawstore.Open(rawstore.Options{Dir: "db", FS: errorfs.Wrap(vfs.NewMem(), g)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	idx, err := st.RelayIndex("ws://relay.test")
	if err != nil {
		t.Fatal(err)
	}
	q, err := shard.NewQueue([]shard.Shard{{ID: "0", Since: 1000, Until: 2000, Cursor: 2000}}, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := q.Next()
	if !ok {
		t.Fatal("queue handed out nothing")
	}
	c := &Crawler{opts: Options{Store: st, OnCommit: func() {}}}
	return &relayCrawl{c: c, url: "ws://relay.test", idx: idx, log: zap.NewNop(), queue: q,
		job: &jobState{key: "job"}}, s
}

// pagerPage is a page of ten events, one per second down from top.
func pagerPage(top int64) *relayconn.Page {
	p := &relayconn.Page{}
	for j := range int64(10) {
		var id [32]byte
		binary.BigEndian.PutUint64(id[:], uint64(top-j))
		id = sha256.Sum256(id[:])
		raw := fmt.Sprintf(`{"id":"%x","pubkey":"%064x","created_at":%d,"kind":1,"tags":[],"content":"","sig":"%0128x"}`, id, 1, top-j, 2)
		p.Items = append(p.Items, relayconn.Item{ID: id, Raw: []byte(raw), CreatedAt: top - j})
	}
	return p
}

// A page judged before the relay was caught, trusting what the catch
// shows false, and committed after it is marked for paging again: the
// catch marked only what had landed (repageAllPaged).
func TestCommitAheadCaughtInFlight(t *testing.T) {
	for _, c := range []struct {
		name  string
		catch func(*relayCrawl)
		adv   func(*shardAdvance)
		want  bool
	}{
		{"unordered", func(r *relayCrawl) { r.catchUnordered("test") }, func(a *shardAdvance) { a.trusted = true }, true},
		{"events after EOSE", (*relayCrawl).catchAfterEOSE, func(a *shardAdvance) { a.endTrusted = true }, true},
		{"unordered, the page not trusted", func(r *relayCrawl) { r.catchUnordered("test") }, func(a *shardAdvance) { a.endTrusted = true }, false},
		{"events after EOSE, the page not trusting its end", (*relayCrawl).catchAfterEOSE, func(a *shardAdvance) { a.trusted = true }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := storetest.NewSyncGate(".seg", true)
			r, s := pagerCrawl(t, g)
			adv := shardAdvance{id: s.ID, cursor: 1991, from: s.Cursor}
			c.adv(&adv)
			next, ahead := r.commitAhead(pagerPage(2000), nil, s, adv)
			<-g.Entered() // the commit waits for its bodies' sync
			c.catch(r)
			g.Release()
			if _, err := ahead.wait(); err != nil {
				t.Fatal(err)
			}
			if next.Cursor != 1991 {
				t.Errorf("shard after the page %+v, want cursor 1991", next)
			}
			var want []Span
			if c.want {
				want = []Span{{Since: 1991, Until: 2000}}
			}
			if !slices.Equal(r.rec.Repage, want) {
				t.Errorf("ranges to page again %v, want %v", r.rec.Repage, want)
			}
		})
	}
}
