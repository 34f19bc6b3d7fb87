package testrelay

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/nostr-archiver/archiver/event"
)

func newRelay(t testing.TB, o Options, items ...Item) *Relay {
	t.Helper()
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	r.Add(items...)
	return r
}

var testAuthors = []string{strings.Repeat("a1", 32), strings.Repeat("b2", 32), strings.Repeat("c3", 32)}

// synth makes n items at the given seconds; their raw objects carry the
// fields the tests decode, not valid events.
func synth(n int, at func(i int) int64) []Item {
	items := make([]Item, n)
	for i := range items {
		h := sha256.Sum256(fmt.Appendf(nil, "item %d", i))
		it := Item{CreatedAt: at(i), Kind: []int{1, 7}[i%2], PubKey: testAuthors[i%3], ID: hex.EncodeToString(h[:])}
		it.Raw = fmt.Appendf(nil, `{"id":"%s","pubkey":"%s","created_at":%d,"kind":%d}`, it.ID, it.PubKey, it.CreatedAt, it.Kind)
		items[i] = it
	}
	return items
}

type ev struct {
	ID        string `json:"id"`
	PubKey    string `json:"pubkey"`
	CreatedAt int64  `json:"created_at"`
	Kind      int    `json:"kind"`
}

func decodeEvents(t testing.TB, raws []json.RawMessage) []ev {
	t.Helper()
	out := make([]ev, len(raws))
	for i, r := range raws {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, r)
		}
	}
	return out
}

// newestFirst checks NIP-01 order: created_at desc, then id asc.
func newestFirst(t testing.TB, evs []ev) {
	t.Helper()
	for i := 1; i < len(evs); i++ {
		a, b := evs[i-1], evs[i]
		if a.CreatedAt < b.CreatedAt || (a.CreatedAt == b.CreatedAt && a.ID > b.ID) {
			t.Fatalf("events %d and %d out of order: %+v then %+v", i-1, i, a, b)
		}
	}
}

func TestPagingWithUntil(t *testing.T) {
	// 3000 items over 1000 seconds: three per second, so pages end mid-second.
	items := synth(3000, func(i int) int64 { return 1000 + int64(i%1000) })
	r := newRelay(t, Options{MaxLimit: 250}, items...)
	c := dial(t, r.URL())

	seen := map[string]bool{}
	until := int64(5000)
	pages := 0
	for {
		p := c.Req("p", map[string]any{"until": until, "limit": 1000})
		if p.End.Label != "EOSE" {
			t.Fatalf("page ended with %s", p.End.Raw)
		}
		evs := decodeEvents(t, p.Events)
		if len(evs) > 250 {
			t.Fatalf("page of %d events, clamp is 250", len(evs))
		}
		newestFirst(t, evs)
		fresh := 0
		for _, e := range evs {
			if e.CreatedAt > until {
				t.Fatalf("event at %d after until %d", e.CreatedAt, until)
			}
			if !seen[e.ID] {
				seen[e.ID] = true
				fresh++
			}
		}
		pages++
		if fresh == 0 {
			break
		}
		until = evs[len(evs)-1].CreatedAt // inclusive: dedup by id
	}
	if len(seen) != len(items) {
		t.Fatalf("paged %d distinct events, stored %d", len(seen), len(items))
	}
	st := r.Stats()
	if st.Pages != int64(pages) || st.REQs != int64(pages) || st.Conns != 1 {
		t.Fatalf("stats %+v after %d pages", st, pages)
	}
}

func TestFilters(t *testing.T) {
	items := synth(60, func(i int) int64 { return 100 + int64(i/2) }) // two per second: 100..129
	r := newRelay(t, Options{DefaultLimit: 7}, items...)
	c := dial(t, r.URL())
	byID := map[string]Item{}
	for _, it := range items {
		byID[it.ID] = it
	}
	tests := []struct {
		name    string
		filters []map[string]any
		want    func(it Item) bool
		limit   int // expected count when a limit cuts the result, else 0
	}{
		{"since until", []map[string]any{{"since": 110, "until": 119, "limit": 100}},
			func(it Item) bool { return it.CreatedAt >= 110 && it.CreatedAt <= 119 }, 0},
		{"kinds", []map[string]any{{"kinds": []int{7}, "limit": 100}},
			func(it Item) bool { return it.Kind == 7 }, 0},
		{"authors", []map[string]any{{"authors": []string{testAuthors[1]}, "limit": 100}},
			func(it Item) bool { return it.PubKey == testAuthors[1] }, 0},
		{"ids", []map[string]any{{"ids": []string{items[3].ID, items[40].ID}}},
			func(it Item) bool { return it.ID == items[3].ID || it.ID == items[40].ID }, 0},
		{"ids and until", []map[string]any{{"ids": []string{items[3].ID, items[40].ID}, "until": 110}},
			func(it Item) bool { return it.ID == items[3].ID }, 0},
		{"default limit", []map[string]any{{}}, func(it Item) bool { return it.CreatedAt >= 126 }, 7},
		{"limit 0", []map[string]any{{"limit": 0}}, func(Item) bool { return false }, 0},
		{"empty kinds", []map[string]any{{"kinds": []int{}, "limit": 100}}, func(Item) bool { return false }, 0},
		{"union dedup", []map[string]any{
			{"since": 120, "limit": 100},
			{"kinds": []int{1}, "since": 125, "limit": 100},
			{"ids": []string{items[0].ID}},
		}, func(it Item) bool { return it.CreatedAt >= 120 || it.ID == items[0].ID }, 0},
		{"union limits per filter", []map[string]any{
			{"kinds": []int{1}, "limit": 2},
			{"kinds": []int{7}, "limit": 3},
		}, func(it Item) bool {
			return (it.Kind == 1 && it.CreatedAt >= 128) || (it.Kind == 7 && it.CreatedAt >= 127)
		}, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := c.Req("f", tc.filters...)
			if p.End.Label != "EOSE" {
				t.Fatalf("ended with %s", p.End.Raw)
			}
			evs := decodeEvents(t, p.Events)
			newestFirst(t, evs)
			var want []string
			for _, it := range items {
				if tc.want(it) {
					want = append(want, it.ID)
				}
			}
			var got []string
			for _, e := range evs {
				if !tc.want(byID[e.ID]) {
					t.Errorf("unwanted %+v", e)
				}
				got = append(got, e.ID)
			}
			if len(slices.Compact(slices.Sorted(slices.Values(got)))) != len(got) {
				t.Errorf("duplicates in %v", got)
			}
			if n := tc.limit; n == 0 && len(got) != len(want) || n > 0 && len(got) != n {
				t.Errorf("got %d events, want %d (limit %d)", len(got), len(want), tc.limit)
			}
		})
	}
}

func TestFaultKnobsOnPages(t *testing.T) {
	items := synth(100, func(i int) int64 { return 1000 + int64(i) }) // one per second
	tests := []struct {
		name   string
		opts   Options
		filter map[string]any
		check  func(t *testing.T, evs []ev)
	}{
		{"clamp", Options{MaxLimit: 10}, map[string]any{"limit": 50}, func(t *testing.T, evs []ev) {
			if len(evs) != 10 || evs[0].CreatedAt != 1099 {
				t.Fatalf("got %d events from %d, want the 10 newest", len(evs), evs[0].CreatedAt)
			}
		}},
		{"no clamp", Options{MaxLimit: -1}, map[string]any{"limit": 80}, func(t *testing.T, evs []ev) {
			if len(evs) != 80 {
				t.Fatalf("got %d events, want 80", len(evs))
			}
		}},
		{"ignore until", Options{IgnoreUntil: true}, map[string]any{"until": 1010, "limit": 5}, func(t *testing.T, evs []ev) {
			if len(evs) != 5 || evs[0].CreatedAt != 1099 {
				t.Fatalf("want the 5 newest, got %+v", evs)
			}
		}},
		{"strict bounds", Options{SinceExclusive: true, UntilExclusive: true}, map[string]any{"since": 1040, "until": 1045, "limit": 100}, func(t *testing.T, evs []ev) {
			if len(evs) != 4 || evs[0].CreatedAt != 1044 || evs[3].CreatedAt != 1041 {
				t.Fatalf("want 1044..1041, got %+v", evs)
			}
		}},
		{"broad filter refused", Options{RefuseBroad: true}, map[string]any{"kinds": []int{1}, "limit": 5}, func(t *testing.T, evs []ev) {
			if len(evs) != 0 {
				t.Fatalf("a kinds-only filter got %d events, want none", len(evs))
			}
		}},
		{"bounded filter answered empty", Options{EmptyBounded: true}, map[string]any{"until": 1099, "limit": 5}, func(t *testing.T, evs []ev) {
			if len(evs) != 0 {
				t.Fatalf("a filter with until got %d events, want none", len(evs))
			}
		}},
		{"unbounded filter served", Options{EmptyBounded: true}, map[string]any{"limit": 5}, func(t *testing.T, evs []ev) {
			if len(evs) != 5 || evs[0].CreatedAt != 1099 {
				t.Fatalf("want the 5 newest, got %+v", evs)
			}
		}},
		{"precise filter served", Options{RefuseBroad: true}, map[string]any{"kinds": []int{1}, "authors": []string{testAuthors[0]}, "limit": 5}, func(t *testing.T, evs []ev) {
			if len(evs) != 5 || evs[0].PubKey != testAuthors[0] || evs[0].Kind != 1 {
				t.Fatalf("want 5 kind-1 events of the author, got %+v", evs)
			}
		}},
		{"extra out of range", Options{ExtraOutOfRange: 2}, map[string]any{"since": 1040, "until": 1050, "limit": 100}, func(t *testing.T, evs []ev) {
			var at []int64
			for _, e := range evs {
				at = append(at, e.CreatedAt)
			}
			want := []int64{1052, 1051, 1050, 1049, 1048, 1047, 1046, 1045, 1044, 1043, 1042, 1041, 1040, 1039, 1038}
			if !slices.Equal(at, want) {
				t.Fatalf("created_at %v, want %v", at, want)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRelay(t, tc.opts, items...)
			p := dial(t, r.URL()).Req("k", tc.filter)
			if p.End.Label != "EOSE" {
				t.Fatalf("ended with %s", p.End.Raw)
			}
			evs := decodeEvents(t, p.Events)
			newestFirst(t, evs)
			tc.check(t, evs)
		})
	}
}

func TestMaxSubsPerConn(t *testing.T) {
	r := newRelay(t, Options{MaxSubsPerConn: 2}, synth(10, func(i int) int64 { return int64(100 + i) })...)
	c := dial(t, r.URL())
	for _, sub := range []string{"a", "b"} {
		if p := c.Req(sub, map[string]any{"limit": 3}); p.End.Label != "EOSE" || len(p.Events) != 3 {
			t.Fatalf("sub %s: %d events then %s", sub, len(p.Events), p.End.Raw)
		}
	}
	// Open subscriptions stay open after EOSE: a third is refused strfry's way.
	c.Send("REQ", "c", map[string]any{"limit": 3})
	if m := c.NextMsg(); m.Label != "NOTICE" || m.Str(0) != "ERROR: too many concurrent REQs" {
		t.Fatalf("got %s", m.Raw)
	}
	c.ExpectNone(100 * time.Millisecond) // no CLOSED, no EOSE
	// Reusing an open id replaces it; closing one makes room.
	if p := c.Req("a", map[string]any{"limit": 1}); p.End.Label != "EOSE" {
		t.Fatalf("replacing a: %s", p.End.Raw)
	}
	c.Send("CLOSE", "b")
	if p := c.Req("c", map[string]any{"limit": 1}); p.End.Label != "EOSE" {
		t.Fatalf("after CLOSE: %s", p.End.Raw)
	}
	st := r.Stats()
	if st.PeakSubsPerConn != 2 || st.Refusals != 1 || st.CLOSEs != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRateLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   Options
		reason string
		conns  int
	}{
		{"per connection", Options{RateLimit: 0.001, RateBurst: 2}, "rate-limited: slow down", 1},
		{"per IP, strfry form", Options{RateLimit: 0.001, RateBurst: 2, RatePerIP: true, ErrorPrefix: true}, "ERROR: rate-limited: slow down", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRelay(t, tc.opts, synth(5, func(i int) int64 { return int64(i + 1) })...)
			var cs []*client
			for range tc.conns {
				cs = append(cs, dial(t, r.URL()))
			}
			// Two tokens for the connection (or for the IP, whichever socket asks).
			for i := range 2 {
				if p := cs[i%len(cs)].Req(fmt.Sprint("ok", i), map[string]any{"limit": 1}); p.End.Label != "EOSE" {
					t.Fatalf("REQ %d: %s", i, p.End.Raw)
				}
			}
			p := cs[len(cs)-1].Req("over", map[string]any{"limit": 1})
			if p.End.Label != "CLOSED" || p.End.Str(0) != "over" || p.End.Str(1) != tc.reason {
				t.Fatalf("got %s, want CLOSED %q", p.End.Raw, tc.reason)
			}
			if len(p.Events) != 0 {
				t.Fatalf("%d events with a refusal", len(p.Events))
			}
		})
	}
}

func TestMaxConnsPerIP(t *testing.T) {
	r := newRelay(t, Options{MaxConnsPerIP: 2})
	a, b := dial(t, r.URL()), dial(t, r.URL())
	_, resp, err := dialErr(t, r.URL())
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third connection: err %v, resp %v; want HTTP 429", err, resp)
	}
	a.Close()
	_ = b
	deadline := time.Now().Add(wait)
	for r.Stats().OpenConns != 1 { // the relay notices the close asynchronously
		if time.Now().After(deadline) {
			t.Fatal("relay did not notice the closed connection")
		}
		time.Sleep(time.Millisecond)
	}
	// The per-IP count drops when the relay has finished with the closed
	// connection, a moment after OpenConns does: retry until admitted.
	for {
		_, _, err := dialErr(t, r.URL())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fourth connection after a close: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	// The relay counts a connection once its handler runs, which may be
	// just after the client's upgrade returns.
	for st := r.Stats(); st.Conns != 3 || st.ConnsRefused < 1; st = r.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestDropEvery(t *testing.T) {
	items := synth(100, func(i int) int64 { return int64(1000 + i) })
	r := newRelay(t, Options{DropEvery: 30}, items...)
	c := dial(t, r.URL())
	c.Send("REQ", "d", map[string]any{"limit": 20})
	got := 0
	for {
		b, err := c.Next(wait)
		if errors.Is(err, net.ErrClosed) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		m := decode(t, b)
		switch m.Label {
		case "EVENT":
			got++
		case "EOSE":
			c.Send("REQ", "d", map[string]any{"limit": 20}) // the count spans pages
		default:
			t.Fatalf("unexpected %s", b)
		}
	}
	if got != 30 {
		t.Fatalf("got %d events before the drop, want 30", got)
	}
	// A new connection resumes (its own count starts again).
	if p := dial(t, r.URL()).Req("d", map[string]any{"limit": 20}); p.End.Label != "EOSE" || len(p.Events) != 20 {
		t.Fatalf("after reconnect: %d events, %s", len(p.Events), p.End.Raw)
	}
	if st := r.Stats(); st.Drops != 1 || st.Events != 50 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNoticeOnlyEvery(t *testing.T) {
	r := newRelay(t, Options{NoticeOnlyEvery: 3}, synth(5, func(i int) int64 { return int64(i + 1) })...)
	c := dial(t, r.URL())
	for i := 1; i <= 6; i++ {
		p := c.Req(fmt.Sprint("n", i), map[string]any{"limit": 2})
		want := "EOSE"
		if i%3 == 0 {
			want = "NOTICE"
		}
		if p.End.Label != want {
			t.Fatalf("REQ %d: %s, want %s", i, p.End.Raw, want)
		}
	}
	c.ExpectNone(50 * time.Millisecond)
	// COUNTs are counted apart: the third COUNT fails, not the first.
	r = newRelay(t, Options{SupportCount: true, CountNoticeEvery: 3}, synth(5, func(i int) int64 { return int64(i + 1) })...)
	c = dial(t, r.URL())
	for i := 1; i <= 6; i++ {
		c.Send("COUNT", fmt.Sprint("n", i), map[string]any{})
		want := "COUNT"
		if i%3 == 0 {
			want = "NOTICE"
		}
		if m := c.NextMsg(); m.Label != want {
			t.Fatalf("COUNT %d: %s, want %s", i, m.Raw, want)
		}
	}
}

func authEvent(t testing.TB, sk *btcec.PrivateKey, relay, challenge string, kind int) *event.Event {
	t.Helper()
	e := &event.Event{CreatedAt: time.Now().Unix(), Kind: kind, Tags: [][]string{{"relay", relay}, {"challenge", challenge}}}
	if err := e.Sign(sk); err != nil {
		t.Fatal(err)
	}
	return e
}

func exportJSON(e *event.Event) json.RawMessage { return event.AppendJSON(nil, e) }

func TestAuth(t *testing.T) {
	for _, prefix := range []bool{false, true} {
		t.Run(fmt.Sprint("ErrorPrefix=", prefix), func(t *testing.T) {
			r := newRelay(t, Options{AuthRequired: true, ErrorPrefix: prefix}, synth(5, func(i int) int64 { return int64(i + 1) })...)
			c := dial(t, r.URL())
			m := c.NextMsg()
			if m.Label != "AUTH" || len(m.Str(0)) < 16 {
				t.Fatalf("first message %s, want an AUTH challenge", m.Raw)
			}
			challenge := m.Str(0)

			p := c.Req("s", map[string]any{"limit": 5})
			want := "auth-required: "
			if prefix {
				want = "ERROR: auth-required: "
			}
			if p.End.Label != "CLOSED" || !strings.HasPrefix(p.End.Str(1), want) {
				t.Fatalf("before AUTH: %s", p.End.Raw)
			}

			seed := sha256.Sum256([]byte("auth key"))
			sk, _ := btcec.PrivKeyFromBytes(seed[:])
			bad := []*event.Event{
				authEvent(t, sk, r.URL(), "wrong challenge", KindAuth),
				authEvent(t, sk, "ws://elsewhere.example", challenge, KindAuth),
				authEvent(t, sk, r.URL(), challenge, 1),
			}
			forged := authEvent(t, sk, r.URL(), challenge, KindAuth)
			forged.Sig[40] ^= 1
			bad = append(bad, forged)
			for _, e := range bad {
				c.Send("AUTH", exportJSON(e))
				if m := c.NextMsg(); m.Label != "OK" || string(m.Args[1]) != "false" || m.Str(0) != hex.EncodeToString(e.ID[:]) {
					t.Fatalf("bad AUTH answered %s", m.Raw)
				}
			}
			good := authEvent(t, sk, r.URL()+"/", challenge, KindAuth)
			c.Send("AUTH", exportJSON(good))
			if m := c.NextMsg(); m.Label != "OK" || string(m.Args[1]) != "true" {
				t.Fatalf("good AUTH answered %s", m.Raw)
			}
			if p := c.Req("s", map[string]any{"limit": 5}); p.End.Label != "EOSE" || len(p.Events) != 5 {
				t.Fatalf("after AUTH: %d events, %s", len(p.Events), p.End.Raw)
			}
			if st := r.Stats(); st.AuthOK != 1 || st.AuthFailed != int64(len(bad)) || st.Refusals != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestCount(t *testing.T) {
	items := synth(40, func(i int) int64 { return int64(100 + i) })
	for _, supported := range []bool{false, true} {
		t.Run(fmt.Sprint("SupportCount=", supported), func(t *testing.T) {
			r := newRelay(t, Options{SupportCount: supported, MaxLimit: 5}, items...)
			c := dial(t, r.URL())
			for _, tc := range []struct {
				filters []any
				want    int
			}{
				{[]any{map[string]any{"since": 110}}, 30},
				{[]any{map[string]any{"kinds": []int{1}}}, 20},
				{[]any{map[string]any{"since": 130}, map[string]any{"kinds": []int{7}, "since": 120}}, 15},
			} {
				c.Send(append([]any{"COUNT", "n"}, tc.filters...)...)
				m := c.NextMsg()
				if !supported {
					if m.Label != "CLOSED" || !strings.HasPrefix(m.Str(1), "unsupported: ") {
						t.Fatalf("got %s", m.Raw)
					}
					continue
				}
				var n struct{ Count int }
				if m.Label != "COUNT" || m.Str(0) != "n" || json.Unmarshal(m.Args[1], &n) != nil || n.Count != tc.want {
					t.Fatalf("got %s, want count %d", m.Raw, tc.want)
				}
			}
		})
	}
}

// TestCountCap: a count over the cap is the cap, marked approximate
// unless the cap is silent; one under it is exact and unmarked.
func TestCountCap(t *testing.T) {
	for _, silent := range []bool{false, true} {
		r := newRelay(t, Options{SupportCount: true, CountCap: 25, CountCapSilent: silent}, synth(40, func(i int) int64 { return int64(100 + i) })...)
		c := dial(t, r.URL())
		for _, tc := range []struct {
			since  int
			want   int
			capped bool
		}{{110, 25, true}, {120, 20, false}, {115, 25, false}} {
			c.Send("COUNT", "n", map[string]any{"since": tc.since})
			m := c.NextMsg()
			var n struct {
				Count       int
				Approximate bool
			}
			if m.Label != "COUNT" || json.Unmarshal(m.Args[1], &n) != nil || n.Count != tc.want || n.Approximate != (tc.capped && !silent) {
				t.Fatalf("silent %v, since %d: got %s, want count %d approximate %v", silent, tc.since, m.Raw, tc.want, tc.capped && !silent)
			}
		}
	}
}

func TestLatencyAndCloseCancels(t *testing.T) {
	r := newRelay(t, Options{Latency: 150 * time.Millisecond}, synth(5, func(i int) int64 { return int64(i + 1) })...)
	c := dial(t, r.URL())
	start := time.Now()
	if p := c.Req("l", map[string]any{"limit": 5}); p.End.Label != "EOSE" {
		t.Fatal(p.End.Raw)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("page served in %v, latency is 150ms", d)
	}
	// A CLOSE arriving while the REQ waits cancels it.
	c.Send("REQ", "x", map[string]any{"limit": 5})
	c.Send("CLOSE", "x")
	c.ExpectNone(300 * time.Millisecond)
}

func TestConnectFramesAndMessages(t *testing.T) {
	r := newRelay(t, Options{SendLimitsFrame: true, MaxMessageLength: 200})
	c := dial(t, r.URL())
	if m := c.NextMsg(); m.Label != "LIMITS" {
		t.Fatalf("first message %s, want LIMITS", m.Raw)
	}
	c.Send("EVENT", map[string]any{"id": "abcd"})
	if m := c.NextMsg(); m.Label != "OK" || m.Str(0) != "abcd" || string(m.Args[1]) != "false" {
		t.Fatalf("client EVENT answered %s", m.Raw)
	}
	c.Send("HELLO")
	if m := c.NextMsg(); m.Label != "NOTICE" {
		t.Fatalf("unknown command answered %s", m.Raw)
	}
	c.Send("REQ", strings.Repeat("x", 65), map[string]any{})
	if m := c.NextMsg(); m.Label != "CLOSED" || !strings.HasPrefix(m.Str(1), "invalid: ") {
		t.Fatalf("long sub id answered %s", m.Raw)
	}
	c.Send("REQ", "big", map[string]any{"ids": []string{strings.Repeat("a", 300)}})
	if _, err := c.Next(wait); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("after an oversized frame: %v, want the connection dropped", err)
	}
	if st := r.Stats(); st.Drops != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestFrameItems(t *testing.T) {
	items := []Item{
		{Raw: []byte(`["EVENT","` + SubPlaceholder + `",{"id":`), CreatedAt: 10, Frame: true},
		{Raw: []byte(`not json`), CreatedAt: 9, Frame: true},
	}
	r := newRelay(t, Options{}, items...)
	c := dial(t, r.URL())
	c.Send("REQ", `q"s`, map[string]any{})
	for _, want := range []string{`["EVENT","q\"s",{"id":`, `not json`} {
		b, err := c.Next(wait)
		if err != nil || string(b) != want {
			t.Fatalf("got %q, %v; want %q", b, err, want)
		}
	}
	if m := c.NextMsg(); m.Label != "EOSE" {
		t.Fatal(m.Raw)
	}
}

func TestNIP11(t *testing.T) {
	get := func(t *testing.T, url string, accept string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http"+strings.TrimPrefix(url, "ws"), nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
	}
	t.Run("generated", func(t *testing.T) {
		r := newRelay(t, Options{MaxLimit: 300, MaxSubsPerConn: 7, AuthRequired: true, SupportCount: true})
		code, ctype, body := get(t, r.URL(), "application/nostr+json")
		var doc struct {
			SupportedNIPs []int `json:"supported_nips"`
			Limitation    struct {
				MaxLimit         int  `json:"max_limit"`
				MaxSubscriptions int  `json:"max_subscriptions"`
				AuthRequired     bool `json:"auth_required"`
			}
		}
		if code != 200 || ctype != "application/nostr+json" || json.Unmarshal([]byte(body), &doc) != nil {
			t.Fatalf("%d %s %s", code, ctype, body)
		}
		if doc.Limitation.MaxLimit != 300 || doc.Limitation.MaxSubscriptions != 7 || !doc.Limitation.AuthRequired ||
			!slices.Equal(doc.SupportedNIPs, []int{1, 11, 42, 45}) {
			t.Fatalf("document %s", body)
		}
		if code, _, _ := get(t, r.URL(), ""); code != 200 {
			t.Fatalf("plain GET: %d", code)
		}
	})
	t.Run("verbatim", func(t *testing.T) {
		r := newRelay(t, Options{Info: []byte(`{"limitation":{"max_limit":5000}}`)})
		if _, _, body := get(t, r.URL(), "application/nostr+json"); body != `{"limitation":{"max_limit":5000}}` {
			t.Fatalf("body %s", body)
		}
	})
	t.Run("none", func(t *testing.T) {
		r := newRelay(t, Options{NoInfo: true})
		if code, _, _ := get(t, r.URL(), "application/nostr+json"); code != 404 {
			t.Fatalf("code %d", code)
		}
		dial(t, r.URL()) // WebSocket still upgrades
	})
}

func TestSetOptions(t *testing.T) {
	r := newRelay(t, Options{}, synth(50, func(i int) int64 { return int64(i + 1) })...)
	c := dial(t, r.URL())
	if p := c.Req("a", map[string]any{"limit": 30}); len(p.Events) != 30 {
		t.Fatalf("%d events", len(p.Events))
	}
	if err := r.SetOptions(func(o *Options) { o.MaxLimit = 10 }); err != nil {
		t.Fatal(err)
	}
	if p := c.Req("a", map[string]any{"limit": 30}); len(p.Events) != 10 {
		t.Fatalf("%d events after clamping to 10", len(p.Events))
	}
	if err := r.SetOptions(func(o *Options) { o.DropEvery = -1 }); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("invalid change: %v", err)
	}
	if err := r.SetOptions(func(o *Options) { o.QueueDepth = 3 }); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("fixed option changed: %v", err)
	}
	if r.Options().MaxLimit != 10 {
		t.Fatal("a rejected change took effect")
	}
}

func TestAddWhileServing(t *testing.T) {
	r := newRelay(t, Options{}, synth(10, func(i int) int64 { return int64(100 + i) })...)
	c := dial(t, r.URL())
	if p := c.Req("a", map[string]any{}); len(p.Events) != 10 {
		t.Fatalf("%d events", len(p.Events))
	}
	more := synth(20, func(i int) int64 { return int64(50 + i) })[10:] // new ids, older seconds
	r.Add(more...)                                                     // also pushed live to "a"; a fresh connection sees only stored events
	p := dial(t, r.URL()).Req("b", map[string]any{})
	evs := decodeEvents(t, p.Events)
	newestFirst(t, evs)
	if len(evs) != 20 || r.Len() != 20 {
		t.Fatalf("%d events served, %d stored", len(evs), r.Len())
	}
}

func TestCloseWithBusyClients(t *testing.T) {
	// A client that never reads leaves the writer blocked in a write; Close
	// must still end every goroutine (goleak checks after the tests).
	items := synth(20000, func(i int) int64 { return int64(i) })
	for i := range items {
		items[i].Raw = append(items[i].Raw[:len(items[i].Raw)-1], fmt.Sprintf(`,"pad":"%01000d"}`, i)...)
	}
	r, err := New(Options{MaxLimit: -1})
	if err != nil {
		t.Fatal(err)
	}
	r.Add(items...)
	nc := rawUpgrade(t, r.URL())
	defer nc.Close()
	req := `["REQ","all",{"limit":20000}]`
	// A client frame: FIN+text, masked with the zero key, so the payload is as is.
	if _, err := nc.Write(append([]byte{0x81, 0x80 | byte(len(req)), 0, 0, 0, 0}, req...)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if st := r.Stats(); st.Pages != 0 || st.REQs != 1 {
		t.Fatalf("stats %+v: want the page stuck behind the unread socket", st)
	}
	done := make(chan error)
	go func() { done <- r.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("Close hangs behind a blocked writer")
	}
}

// rawUpgrade opens a WebSocket connection by hand and returns the socket,
// which the test may then leave unread.
func rawUpgrade(t *testing.T, url string) net.Conn {
	t.Helper()
	host := strings.TrimPrefix(url, "ws://")
	nc, err := net.DialTimeout("tcp", host, wait)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(nc, "GET / HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", host)
	var head []byte
	b := make([]byte, 1)
	for !strings.HasSuffix(string(head), "\r\n\r\n") {
		if _, err := nc.Read(b); err != nil {
			t.Fatalf("handshake: %v after %q", err, head)
		}
		head = append(head, b[0])
	}
	if !strings.HasPrefix(string(head), "HTTP/1.1 101") {
		t.Fatalf("handshake answered %q", head)
	}
	return nc
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{
		{Addr: "no port"}, {ExtraOutOfRange: -1}, {MaxSubsPerConn: -1}, {RateLimit: -1},
		{MaxConnsPerIP: -1}, {DropEvery: -1}, {NoticeOnlyEvery: -2}, {CountNoticeEvery: -1}, {Latency: -1}, {MaxMessageLength: -1},
	} {
		if _, err := New(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
	if d := (Options{RateLimit: 2.5}).withDefaults(); d.RateBurst != 3 || d.MaxLimit != 500 || d.DefaultLimit != 500 || d.Addr != DefaultAddr {
		t.Errorf("defaults %+v", d)
	}
}

func TestPageReadyWorkers(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		workers  int
		arrivals []int // ms
		want     []int // ms
	}{
		{1, []int{0, 0, 0}, []int{100, 200, 300}},
		{2, []int{0, 0, 0, 0}, []int{100, 100, 200, 200}},
		{4, []int{0, 0, 0, 0, 0}, []int{100, 100, 100, 100, 200}},
		{2, []int{0, 150, 160, 500}, []int{100, 250, 260, 600}},
	} {
		c := &conn{}
		o := &Options{Latency: 100 * time.Millisecond, PageWorkers: tc.workers}
		for i, a := range tc.arrivals {
			if got := c.pageReady(ms(a), o); !got.Equal(ms(tc.want[i])) {
				t.Errorf("workers %d, REQ %d arriving at %dms: ready at %v, want %dms", tc.workers, i, a, got.Sub(t0), tc.want[i])
			}
		}
	}
	if got := (&conn{}).pageReady(t0, &Options{PageWorkers: 3}); !got.IsZero() {
		t.Errorf("no latency: ready at %v, want at once", got)
	}
}

func TestPacerSpreadsCapacity(t *testing.T) {
	var p pacer
	t0 := time.Unix(1000, 0)
	if got := p.reserve(t0, 500, 0); !got.IsZero() {
		t.Fatalf("no capacity cap: wait until %v", got)
	}
	// 1000 events/s: pages of 500 are ready 0.5 s apart, however many ask at once.
	for i, want := range []time.Duration{500, 1000, 1500} {
		if got := p.reserve(t0, 500, 1000).Sub(t0); got != want*time.Millisecond {
			t.Errorf("page %d ready at +%v, want +%vms", i, got, want)
		}
	}
	// After an idle spell the budget restarts from now, not from the past.
	later := t0.Add(10 * time.Second)
	if got := p.reserve(later, 100, 1000).Sub(later); got != 100*time.Millisecond {
		t.Errorf("after idle: ready at +%v, want +100ms", got)
	}
}

// TestCapacityAndCadenceOverSockets checks the service model end to end:
// the floors a client can measure (a bound below, never above, so that a
// loaded machine cannot fail it).
func TestCapacityAndCadenceOverSockets(t *testing.T) {
	items := synth(2000, func(i int) int64 { return int64(i + 1) })
	r := newRelay(t, Options{Latency: 50 * time.Millisecond, Capacity: 10000}, items...)
	c := dial(t, r.URL())
	start := time.Now()
	for i := range 4 {
		c.Send("REQ", fmt.Sprint("s", i), map[string]any{"limit": 500, "until": 2000 - 500*i})
	}
	n := 0
	for eose := 0; eose < 4; {
		m := c.NextMsg()
		switch m.Label {
		case "EVENT":
			n++
		case "EOSE":
			eose++
		default:
			t.Fatalf("unexpected %s", m.Raw)
		}
	}
	// 2000 events at 10,000/s take >= 200 ms; one worker serves 4 pages in >= 4 x 50 ms.
	if d := time.Since(start); n != 2000 || d < 200*time.Millisecond {
		t.Fatalf("%d events in %v: want 2000 in >= 200ms", n, d)
	}
}

// TestAuthAllow: with a whitelist, an authenticated key that is not on it
// is refused with restricted:, one that is gets served.
func TestAuthAllow(t *testing.T) {
	member := sha256.Sum256([]byte("member key"))
	outsider := sha256.Sum256([]byte("outsider key"))
	skMember, pkMember := btcec.PrivKeyFromBytes(member[:])
	skOutsider, _ := btcec.PrivKeyFromBytes(outsider[:])
	r := newRelay(t, Options{AuthRequired: true, AuthAllow: []string{hex.EncodeToString(schnorr.SerializePubKey(pkMember))}},
		synth(5, func(i int) int64 { return int64(i + 1) })...)
	for _, tc := range []struct {
		name string
		sk   *btcec.PrivateKey
		end  string
		n    int
	}{
		{"outsider", skOutsider, "CLOSED", 0},
		{"member", skMember, "EOSE", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, r.URL())
			challenge := c.NextMsg().Str(0)
			c.Send("AUTH", exportJSON(authEvent(t, tc.sk, r.URL(), challenge, KindAuth)))
			if m := c.NextMsg(); m.Label != "OK" || string(m.Args[1]) != "true" {
				t.Fatalf("AUTH answered %s", m.Raw)
			}
			p := c.Req("s", map[string]any{"limit": 5})
			if p.End.Label != tc.end || len(p.Events) != tc.n {
				t.Fatalf("%d events, %s; want %d, %s", len(p.Events), p.End.Raw, tc.n, tc.end)
			}
			if tc.end == "CLOSED" && !strings.HasPrefix(p.End.Str(1), "restricted: ") {
				t.Fatalf("refusal %s, want restricted:", p.End.Raw)
			}
		})
	}
}
