package crawl_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/bip340"
	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/testrelay"
	"go.uber.org/zap/zaptest"
)

func testKey(t testing.TB, seed string) (*bip340.PrivateKey, string) {
	t.Helper()
	b := sha256.Sum256([]byte(seed))
	k, err := bip340.NewPrivateKey(b[:])
	if err != nil {
		t.Fatal(err)
	}
	pub := k.PublicKey()
	return k, hex.EncodeToString(pub[:])
}

// TestAuthCrawl crawls relays that serve only authenticated clients. With
// a key the relay is archived completely (every valid event, walls and
// COUNT included, over several connections each answering its own
// challenge); without one, or with a key the relay does not serve, or
// one it rejects, the relay finishes with that reason, naming the key.
func TestAuthCrawl(t *testing.T) {
	checkLeaks(t)
	f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 11, Events: 1500, Wall: 300, CacheDir: fixtureCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	member, memberPub := testKey(t, "member")
	outsider, outsiderPub := testKey(t, "outsider")
	for _, tc := range []struct {
		name   string
		relay  testrelay.Options
		keys   func(url string) *crawl.AuthKeys
		host   string // dial the relay under this host name instead of 127.0.0.1
		finish string
		detail []string
	}{
		{name: "key", relay: testrelay.Options{AuthRequired: true, MaxLimit: 200, SupportCount: true},
			keys:   func(string) *crawl.AuthKeys { return &crawl.AuthKeys{Default: member} },
			finish: crawl.FinishDrained},
		{name: "key per relay, strfry reasons, whitelisted", relay: testrelay.Options{AuthRequired: true, ErrorPrefix: true, MaxLimit: 200, SupportCount: true, AuthAllow: []string{memberPub}},
			keys: func(url string) *crawl.AuthKeys {
				return &crawl.AuthKeys{Default: outsider, PerRelay: map[string]*bip340.PrivateKey{url: member}}
			},
			finish: crawl.FinishDrained},
		{name: "no key", relay: testrelay.Options{AuthRequired: true},
			keys:   func(string) *crawl.AuthKeys { return nil },
			finish: crawl.FinishAuthRequired, detail: []string{"auth-required:", "no key given"}},
		{name: "not whitelisted", relay: testrelay.Options{AuthRequired: true, AuthAllow: []string{memberPub}},
			keys:   func(string) *crawl.AuthKeys { return &crawl.AuthKeys{Default: outsider} },
			finish: crawl.FinishRestricted, detail: []string{"restricted:", outsiderPub}},
		{name: "relay tag the relay does not know", relay: testrelay.Options{AuthRequired: true},
			keys:   func(string) *crawl.AuthKeys { return &crawl.AuthKeys{Default: member} },
			host:   "localhost",
			finish: crawl.FinishAuthRejected, detail: []string{"relay tag", memberPub}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relay := startRelay(t, tc.relay, f.Items)
			url := relay.URL()
			if tc.host != "" {
				url = strings.Replace(url, "127.0.0.1", tc.host, 1)
			}
			a := openArchive(t)
			res := a.crawl(t, crawl.Options{PageTimeout: 2 * time.Second, StartConns: 2, MaxConnsPerRelay: 2, AuthKeys: tc.keys(url)}, url)
			if res[0].Finish != tc.finish {
				t.Fatalf("result %v, want %s", res[0], tc.finish)
			}
			for _, d := range tc.detail {
				if !strings.Contains(res[0].Detail, d) {
					t.Errorf("detail %q does not say %q", res[0].Detail, d)
				}
			}
			rec := a.record(t)
			if rec.Finish != tc.finish {
				t.Errorf("stored finish %q, want %q", rec.Finish, tc.finish)
			}
			st := relay.Stats()
			if tc.finish != crawl.FinishDrained {
				if n := len(a.exported(t)); n != 0 {
					t.Errorf("%d events archived from a relay that served none", n)
				}
				return
			}
			a.verify(t)
			assertExactValidSet(t, a, f)
			// Every connection authenticated once, when asked, and the
			// relay never saw an AUTH it rejected.
			if st.AuthOK < 1 || st.AuthFailed != 0 || rec.Auths != st.AuthOK {
				t.Errorf("relay counted %d AUTHs accepted, %d rejected; the record %d", st.AuthOK, st.AuthFailed, rec.Auths)
			}
		})
	}
}

// A live tail on a relay that wants AUTH answers the challenge and
// subscribes again on the same connection: history and what is published
// afterwards are stored. Without a key the tail returns the relay's
// auth-required reason at once, naming the relay.
func TestAuthTail(t *testing.T) {
	checkLeaks(t)
	f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 12, Events: 300, CacheDir: fixtureCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := testKey(t, "tail")
	history, future := f.Items[:150], f.Items[150:]
	relay := startRelay(t, testrelay.Options{AuthRequired: true}, history)

	a := openArchive(t)
	noKey, err := crawl.New(crawl.Options{Store: a.store, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := noKey.Tail(context.Background(), relay.URL(), crawl.TailOptions{Since: f.Since}); err == nil ||
		!strings.Contains(err.Error(), "auth-required:") || !strings.Contains(err.Error(), relay.URL()) {
		t.Fatalf("tail without a key: %v", err)
	}

	c, err := crawl.New(crawl.Options{Store: a.store, Logger: zaptest.NewLogger(t), AuthKeys: &crawl.AuthKeys{Default: key}})
	if err != nil {
		t.Fatal(err)
	}
	stop := tailing(t, c, relay.URL(), crawl.TailOptions{Since: f.Since, Flush: 20 * time.Millisecond, Overlap: time.Hour})
	a.waitHeld(t, int64(len(history)))
	relay.Add(future...)
	a.waitHeld(t, int64(len(f.Items)))
	if err := stop(); err != nil {
		t.Errorf("tail: %v", err)
	}
	if st := relay.Stats(); st.AuthOK != 1 || st.AuthFailed != 0 {
		t.Errorf("relay saw %d AUTHs accepted, %d rejected; want one accepted", st.AuthOK, st.AuthFailed)
	}
	a.verify(t)
	assertExactValidSet(t, a, f)
}
