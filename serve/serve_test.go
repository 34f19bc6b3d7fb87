package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/filter"
	"github.com/nostr-archiver/archiver/filter/filtertest"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/rawstore/storetest"
	"github.com/nostr-archiver/archiver/serve"
	"github.com/nostr-archiver/archiver/testrelay"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// archive is a verified, indexed archive of a generated fixture (with a
// wall of events in one second, and invalid events that must never be
// served), and every valid event in NIP-01 order.
type archive struct {
	store *rawstore.Store
	all   []*filtertest.Event
	bad   []string // ids archived with no valid copy
}

func newArchive(t testing.TB) *archive {
	t.Helper()
	fix, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 14, Events: 400, Authors: 8, Wall: 150,
		ForgedIDs: 5, BadSigs: 5, Duplicates: 5, Varied: 10, CacheDir: fixtureCache()})
	if err != nil {
		t.Fatal(err)
	}
	s := storetest.Verified(t, fix.Items)
	a := &archive{store: s}
	err = s.ForEachValid(func(_ [32]byte, raw []byte) error {
		e, err := filtertest.Decode(raw)
		a.all = append(a.all, e)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	filtertest.Sort(a.all)
	valid := map[string]bool{}
	for _, e := range a.all {
		valid[e.ID] = true
	}
	for _, bad := range fix.Bad {
		var id [32]byte
		if event.DecodeHex32(&id, []byte(bad.ID)) == nil && !valid[bad.ID] && !slices.Contains(a.bad, bad.ID) {
			a.bad = append(a.bad, bad.ID)
		}
	}
	if len(a.bad) == 0 {
		t.Fatal("the fixture has no invalid ids")
	}
	if len(a.all) != len(fix.Valid) {
		t.Fatalf("%d valid events archived, the fixture has %d", len(a.all), len(fix.Valid))
	}
	return a
}

func start(t testing.TB, q serve.Querier, o serve.Options) *serve.Server {
	t.Helper()
	o.Addr = "127.0.0.1:0"
	srv, err := serve.New(q, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

// exportLines is every valid event of s as export writes it, sorted.
func exportLines(t *testing.T, s *rawstore.Store) []string {
	t.Helper()
	var out []string
	err := s.ForEachValid(func(_ [32]byte, raw []byte) error {
		e, err := event.Parse(raw)
		if err != nil {
			return err
		}
		out = append(out, string(event.AppendJSON(nil, e)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// Our crawler, pointed at the served archive with a small max_limit (so it
// pages, and meets a wall of 150 events in one second), archives exactly
// what the first archive holds.
func TestCrawlServedArchive(t *testing.T) {
	a := newArchive(t)
	srv := start(t, a.store, serve.Options{MaxLimit: 50})
	dst, err := rawstore.Open(rawstore.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	c, err := crawl.New(crawl.Options{Store: dst, Logger: zaptest.NewLogger(t),
		BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := c.Run(ctx, []string{srv.URL()})
	if len(res) != 1 || !res[0].Drained() {
		t.Fatalf("crawl of the served archive: %v", res)
	}
	storetest.Verify(t, dst)
	want, got := exportLines(t, a.store), exportLines(t, dst)
	if !slices.Equal(got, want) {
		t.Fatalf("the crawled copy has %d events, the archive %d (or they differ)", len(got), len(want))
	}
}

func ptr[T any](v T) *T { return &v }

// REQ answers equal a brute-force scan: same events, same order (newest
// first, then by id), each filter's limit, capped at max_limit.
func TestREQMatchesBrute(t *testing.T) {
	a := newArchive(t)
	const maxLimit = 100
	srv := start(t, a.store, serve.Options{MaxLimit: maxLimit})
	c := dial(t, srv.URL(), true)
	mid := a.all[len(a.all)/2]
	withTag := func() *filtertest.Event {
		for _, e := range a.all {
			for _, tg := range e.Tags {
				if len(tg) >= 2 && tg[0] == "p" {
					return e
				}
			}
		}
		t.Fatal("no p tag in the fixture")
		return nil
	}()
	var pval string
	for _, tg := range withTag.Tags {
		if len(tg) >= 2 && tg[0] == "p" {
			pval = tg[1]
			break
		}
	}
	tests := []struct {
		name string
		fs   []filtertest.Filter
		lim  int // the limit the server applies when the filter sets none
	}{
		{"everything, capped at max_limit", []filtertest.Filter{{}}, maxLimit},
		{"limit over max_limit", []filtertest.Filter{{Limit: ptr(1000)}}, maxLimit},
		{"small limit", []filtertest.Filter{{Limit: ptr(7)}}, 0},
		{"ids", []filtertest.Filter{{IDs: []string{a.all[3].ID, mid.ID, strings.Repeat("0", 64)}}}, maxLimit},
		{"author and kinds", []filtertest.Filter{{Authors: []string{mid.PubKey}, Kinds: []int{mid.Kind}}}, maxLimit},
		{"tag", []filtertest.Filter{{Tags: map[string][]string{"p": {pval}}}}, maxLimit},
		{"since until", []filtertest.Filter{{Since: ptr(mid.CreatedAt - 3600), Until: ptr(mid.CreatedAt)}}, maxLimit},
		{"two filters, union once", []filtertest.Filter{{Kinds: []int{1}, Limit: ptr(20)}, {Authors: []string{mid.PubKey}, Limit: ptr(20)}}, 0},
		{"empty list matches nothing", []filtertest.Filter{{Kinds: []int{}}}, maxLimit},
		{"invalid events are never served", []filtertest.Filter{{IDs: a.bad}}, maxLimit},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js := make([]string, len(tt.fs))
			for j, f := range tt.fs {
				js[j] = f.JSON()
				if f.Limit == nil {
					tt.fs[j].Limit = &tt.lim
				} else if *f.Limit > maxLimit {
					tt.fs[j].Limit = ptr(maxLimit)
				}
			}
			p := c.ReqRaw(mustJSON(i), js...)
			if p.End.Label != "EOSE" {
				t.Fatalf("ended with %s", p.End.Raw)
			}
			want := filtertest.Brute(a.all, tt.fs)
			if len(want) == 0 != strings.HasPrefix(tt.name, "empty") && !strings.HasPrefix(tt.name, "invalid") {
				t.Fatalf("the fixture gives this case %d events", len(want))
			}
			if !slices.Equal(p.IDs(), want) {
				t.Fatalf("got %d events, brute force %d:\n got %v\nwant %v", len(p.IDs()), len(want), p.IDs(), want)
			}
			c.Send("CLOSE", mustJSON(i))
		})
	}
}

func TestCOUNT(t *testing.T) {
	a := newArchive(t)
	srv := start(t, a.store, serve.Options{MaxLimit: 10, MaxCount: 100})
	c := dial(t, srv.URL(), true)
	mid := a.all[len(a.all)/2]
	f := filtertest.Filter{Authors: []string{mid.PubKey}}
	want := len(filtertest.Brute(a.all, []filtertest.Filter{f}))
	if want <= 10 || want >= 100 {
		t.Fatalf("fixture: %d events by one author, want 10 < n < 100", want)
	}
	tests := []struct {
		filter string
		want   string
	}{
		{f.JSON(), `["COUNT","c",{"count":` + mustJSON(want) + `}]`}, // not capped by max_limit
		{`{}`, `["COUNT","c",{"approximate":true,"count":100}]`},     // capped by MaxCount
		{`{"kinds":[]}`, `["COUNT","c",{"count":0}]`},
	}
	for _, tt := range tests {
		c.SendRaw([]byte(`["COUNT","c",` + tt.filter + `]`))
		if m := c.NextMsg(); string(m.Raw) != tt.want {
			t.Errorf("COUNT %s: got %s, want %s", tt.filter, m.Raw, tt.want)
		}
	}
}

// EVENT is refused, malformed messages get a NOTICE and the connection
// stays, and the subscription cap is enforced.
func TestRefusals(t *testing.T) {
	a := newArchive(t)
	srv := start(t, a.store, serve.Options{MaxSubs: 3})
	c := dial(t, srv.URL(), true)
	tests := []struct {
		send  string
		label string
		want  string // a substring of the answer
	}{
		{`["EVENT",{"id":"abc","kind":1}]`, "OK", `["OK","abc",false,"blocked: this relay is a read-only archive"]`},
		{`not json`, "NOTICE", "invalid"},
		{`[]`, "NOTICE", "invalid"},
		{`[1,2]`, "NOTICE", "invalid"},
		{`["AUTH",{}]`, "NOTICE", "unsupported"},
		{`["REQ"]`, "NOTICE", "subscription id"},
		{`["REQ","x",{"kind":1}]`, "CLOSED", `"x","invalid:`},
		{`["REQ","x"]`, "CLOSED", "no filter"},
	}
	for _, tt := range tests {
		c.SendRaw([]byte(tt.send))
		m := c.NextMsg()
		if m.Label != tt.label || !strings.Contains(string(m.Raw), tt.want) {
			t.Errorf("%s: got %s, want %s with %q", tt.send, m.Raw, tt.label, tt.want)
		}
	}
	for i := range 3 {
		if p := c.ReqRaw(mustJSON(i), `{"limit":1}`); p.End.Label != "EOSE" || len(p.IDs()) != 1 {
			t.Fatalf("sub %d: %d events then %s", i, len(p.IDs()), p.End.Raw)
		}
	}
	if p := c.ReqRaw("4th", `{"limit":1}`); string(p.End.Raw) != `["CLOSED","4th","error: too many subscriptions"]` {
		t.Fatalf("4th subscription: %d events then %s", len(p.IDs()), p.End.Raw)
	}
	// Reusing an id replaces that subscription; a CLOSE frees a slot.
	if p := c.ReqRaw("0", `{"limit":2}`); p.End.Label != "EOSE" || len(p.IDs()) != 2 {
		t.Fatalf("reused id: %d events then %s", len(p.IDs()), p.End.Raw)
	}
	c.Send("CLOSE", "1")
	if p := c.ReqRaw("4th", `{"limit":1}`); p.End.Label != "EOSE" {
		t.Fatalf("after CLOSE: %s", p.End.Raw)
	}
}

func TestNIP11(t *testing.T) {
	a := newArchive(t)
	srv := start(t, a.store, serve.Options{MaxLimit: 123, MaxSubs: 7, MaxMessageLength: 4096})
	req, _ := http.NewRequest("GET", "http"+strings.TrimPrefix(srv.URL(), "ws"), nil)
	req.Header.Set("Accept", "application/nostr+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var doc struct {
		NIPs []int `json:"supported_nips"`
		Lim  struct {
			MaxLimit  int  `json:"max_limit"`
			MaxSubs   int  `json:"max_subscriptions"`
			MaxMsgLen int  `json:"max_message_length"`
			Writes    bool `json:"restricted_writes"`
		} `json:"limitation"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if !slices.Equal(doc.NIPs, []int{1, 11, 45, 77}) || doc.Lim.MaxLimit != 123 || doc.Lim.MaxSubs != 7 || doc.Lim.MaxMsgLen != 4096 || !doc.Lim.Writes {
		t.Fatalf("NIP-11 document %s", body)
	}
	// A message over max_message_length ends the connection.
	c := dial(t, srv.URL(), true)
	c.SendRaw([]byte(`["REQ","x",{"search":"` + strings.Repeat("a", 5000) + `"}]`))
	if b, err := c.Next(wait); err == nil {
		t.Fatalf("answer to an oversized message: %s", b)
	}
}

// A client that sends REQs and never reads is disconnected once its
// answers back up, rather than buffered without bound.
func TestSlowReaderDropped(t *testing.T) {
	a := newArchive(t)
	dropped := make(chan error, 100)
	srv := start(t, a.store, serve.Options{MaxSubs: 1000, QueueDepth: 8, WriteTimeout: 200 * time.Millisecond,
		ErrorLog: func(err error) {
			select {
			case dropped <- err:
			default:
			}
		}})
	c := dial(t, srv.URL(), false)
	var sent int
	for i := range 1000 {
		b := []byte(`["REQ",` + mustJSON(i) + `,{}]`)
		if err := c.Write(b); err != nil {
			break // the server has hung up already
		}
		sent++
	}
	select {
	case err := <-dropped:
		t.Logf("after %d REQs: %v", sent, err)
	case <-time.After(wait):
		t.Fatal("a client that never reads was not dropped")
	}
	c.StartReading()
	for {
		if _, err := c.Next(wait); err == net.ErrClosed {
			break
		} else if err != nil {
			t.Fatalf("connection still open after the drop: %v", err)
		}
	}
}

// newest is the archive's newest event, decoded.
func (a *archive) newest(t *testing.T) *event.Event {
	t.Helper()
	var e *event.Event
	err := a.store.Query([]filter.Filter{{Until: filter.MaxUntil, Limit: 1}}, func(ev *event.Event, raw []byte) error {
		var err error
		e, err = event.Parse(bytes.Clone(raw))
		return err
	})
	if err != nil || e == nil {
		t.Fatalf("no event to serve: %v", err)
	}
	return e
}

// endless answers every query with the same event, forever, until told
// to stop: a result larger than any socket buffer.
type endless struct{ e *event.Event }

func (q endless) Query(_ []filter.Filter, fn func(*event.Event, []byte) error) error {
	for {
		if err := fn(q.e, nil); err != nil {
			return err
		}
	}
}

func (endless) QueryIDs([]filter.Filter, func(int64, [32]byte) error) error { return nil }

// A client that stops reading in the middle of one large answer is
// dropped when a write outlasts WriteTimeout; the query is abandoned.
func TestStalledReaderDropped(t *testing.T) {
	a := newArchive(t)
	e := a.newest(t)
	logged := make(chan error, 10)
	srv := start(t, endless{e}, serve.Options{WriteTimeout: 200 * time.Millisecond,
		ErrorLog: func(err error) {
			select {
			case logged <- err:
			default:
			}
		}})
	c := dial(t, srv.URL(), false)
	c.Send("REQ", "big", map[string]any{})
	select {
	case err := <-logged:
		if !strings.Contains(err.Error(), "write") {
			t.Fatalf("dropped for another reason: %v", err)
		}
		t.Log(err)
	case <-time.After(2 * wait):
		t.Fatal("a client that stopped reading was not dropped")
	}
	c.StartReading()
	for {
		if _, err := c.Next(wait); err == net.ErrClosed {
			break
		} else if err != nil {
			t.Fatalf("connection still open after the drop: %v", err)
		}
	}
}

// BenchmarkREQAll downloads the whole archive in one REQ per iteration;
// the client only counts frames (decoding them would measure the client).
func BenchmarkREQAll(b *testing.B) {
	a := newArchive(b)
	srv := start(b, a.store, serve.Options{})
	c := dial(b, srv.URL(), true)
	b.ResetTimer()
	for i := range b.N {
		c.SendRaw([]byte(`["REQ","all",{}]`))
		n := 0
		for {
			m, err := c.Next(wait)
			if err != nil {
				b.Fatal(err)
			}
			if !bytes.HasPrefix(m, []byte(`["EVENT","all",`)) {
				if string(m) != `["EOSE","all"]` || n != len(a.all) {
					b.Fatalf("REQ %d: %d events then %s", i, n, m)
				}
				break
			}
			n++
		}
	}
	b.ReportMetric(float64(b.N*len(a.all))/b.Elapsed().Seconds(), "events/s")
}

// CLOSE stops an answer in the middle: no EOSE follows, and the writer
// goes on to the next message (a COUNT, answered).
func TestCloseStopsAnswer(t *testing.T) {
	a := newArchive(t)
	e := a.newest(t)
	srv := start(t, endless{e}, serve.Options{MaxCount: 10})
	c := dial(t, srv.URL(), true)
	c.Send("REQ", "big", map[string]any{})
	if m := c.NextMsg(); m.Label != "EVENT" {
		t.Fatalf("first answer %s", m.Raw)
	}
	c.Send("CLOSE", "big")
	c.Send("COUNT", "n", map[string]any{})
	for {
		m := c.NextMsg()
		if m.Label == "EVENT" && m.Str(0) == "big" {
			continue // sent before the CLOSE was read
		}
		if string(m.Raw) != `["COUNT","n",{"approximate":true,"count":10}]` {
			t.Fatalf("after CLOSE: %s", m.Raw)
		}
		break
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
