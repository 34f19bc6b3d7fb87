package interop

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/rawstore"
	"go.uber.org/zap/zaptest"
)

// TestNostrRelayWallUnseen: this relay returns the events of one second
// newest-inserted first, so a wall's first page can hide a kind, or an
// author, altogether. A crawl may then fail to fetch them, but it must not
// say "drained".
func TestNostrRelayWallUnseen(t *testing.T) {
	type group struct{ author, kind, n int } // published in this order
	for _, tc := range []struct {
		name   string
		groups []group
	}{
		{"kind not on the first page", []group{{3, 7, 30}, {0, 1, 50}, {1, 1, 50}}},
		{"author not on the first page", []group{{2, 1, 50}, {0, 1, 99}, {1, 1, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			relay := startNostrRelay(t)
			var evs []*event.Event
			for _, g := range tc.groups {
				seed := sha256.Sum256(binary.BigEndian.AppendUint64([]byte("wall unseen"), uint64(g.author)))
				sk, _ := btcec.PrivKeyFromBytes(seed[:])
				for i := range g.n {
					e := &event.Event{CreatedAt: fixtureBase, Kind: g.kind, Content: fmt.Sprintf("%d/%d #%d", g.author, g.kind, i)}
					if err := e.Sign(sk); err != nil {
						t.Fatal(err)
					}
					evs = append(evs, e)
				}
			}
			ch := make(chan *event.Event, len(evs))
			for _, e := range evs {
				ch <- e
			}
			close(ch)
			publish(t, ctx, relay, ch, 1) // one in flight: insertion order is send order
			st, err := rawstore.Open(rawstore.Options{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			c, err := crawl.New(crawl.Options{Store: st, PageLimit: 100, Logger: zaptest.NewLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			res := c.Run(ctx, []string{relay})[0]
			s, err := st.Stats()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%v; archived %d of %d", res, s.Events, len(evs))
			if res.Drained() && s.Events != int64(len(evs)) {
				t.Errorf("crawl says drained but archived %d of %d events", s.Events, len(evs))
			}
			if !res.Drained() && res.Finish != crawl.FinishIncompleteWalls {
				t.Errorf("finish %v, want drained or incomplete-walls", res)
			}
		})
	}
}
