package jobs

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestDecode(t *testing.T) {
	a := strings.Repeat("ab", 32)
	sweep := SweepID("wss://r.example")
	tests := []struct {
		name string
		in   string
		want []string // substrings of the error, all of them; nil: valid
	}{
		{"minimal", `{"id":"j1","relays":["relay.example.com"]}`, nil},
		{"full", `{"id":"a.b-c_9","relays":["wss://r.example","ws://x.example:7777/p"],"filter":{"kinds":[0,1,65535],"authors":["` + a + `"],"since":1,"until":2},"mode":"backfill","priority":0}`, nil},
		{"live", `{"id":"l","relays":["r.example"],"mode":"live","filter":{"since":5}}`, nil},
		{"shard", `{"id":"p/s3","parent":"p","shard":{"since":10,"until":20},"relays":["r.example"],"filter":{"since":0,"until":100}}`, nil},
		{"not json", `{"id":`, []string{"invalid job", "unexpected EOF"}},
		{"trailing", `{"id":"j","relays":["r.example"]} {}`, []string{"data after"}},
		{"unknown field", `{"id":"j","relays":["r.example"],"relay":"x"}`, []string{`unknown field "relay"`}},
		{"every problem named", `{"id":"bad id","relays":[],"filter":{"kinds":[-1,70000],"authors":["AB"],"since":-3},"mode":"now","priority":10}`,
			[]string{"id \"bad id\"", "no relays", "kind -1", "kind 70000", `author "AB"`, "since -3", `mode "now"`, "priority 10"}},
		{"double dot", `{"id":"a..b","relays":["r.example"]}`, []string{`id "a..b"`}},
		{"leading dot", `{"id":".a","relays":["r.example"]}`, []string{`id ".a"`}},
		{"long id", `{"id":"` + strings.Repeat("x", 129) + `","relays":["r.example"]}`, []string{"want [A-Za-z0-9._-]"}},
		{"bad scheme", `{"id":"j","relays":["http2://r.example"]}`, []string{"not ws or wss"}},
		{"userinfo", `{"id":"j","relays":["wss://u:p@r.example"]}`, []string{"no user or password"}},
		{"dup relay", `{"id":"j","relays":["r.example","wss://R.example/"]}`, []string{"listed twice"}},
		{"too many relays", `{"id":"j","relays":[` + strings.Repeat(`"r.example",`, 64) + `"r.example"]}`, []string{"65 relays"}},
		{"until before since", `{"id":"j","relays":["r.example"],"filter":{"since":9,"until":3}}`, []string{"until 3 before since 9"}},
		{"live with until", `{"id":"j","relays":["r.example"],"mode":"live","filter":{"until":3}}`, []string{"live job with until"}},
		{"shard without parent", `{"id":"j","relays":["r.example"],"shard":{"since":1,"until":2}}`, []string{"shard without parent"}},
		{"shard id", `{"id":"q/s1","parent":"p","shard":{"since":1,"until":2},"relays":["r.example"]}`, []string{"shard id"}},
		{"shard outside", `{"id":"p/s1","parent":"p","shard":{"since":1,"until":200},"relays":["r.example"],"filter":{"until":100}}`, []string{"not a range inside"}},
		{"sweep", `{"id":"` + sweep + `","relays":["wss://r.example"],"found":{"how":"nip65","from":"` + a + `"}}`, nil},
		{"sweep id", `{"id":"j","relays":["wss://r.example"],"found":{"how":"nip65","from":"` + a + `"}}`, []string{`sweep job id "j": want "` + sweep + `"`}},
		{"sweep shape", `{"id":"` + sweep + `","relays":["r.example","s.example"],"mode":"live","found":{"how":"NIP 65","from":"x"}}`,
			[]string{"want how", "with 2 relays", "want a backfill"}},
		{"sweep bare host", `{"id":"` + sweep + `","relays":["r.example"],"found":{"how":"nip65","from":"` + a + `"}}`, []string{"want a ws:// or wss:// URL"}},
		{"too big", `{"id":"j","relays":["r.example"],"filter":{"kinds":[` + strings.Repeat("1,", 40000) + `1]}}`, []string{"bytes > 65536"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j, err := Decode([]byte(tc.in))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if j.Mode == "" || j.ID == "" {
					t.Fatalf("decoded %+v", j)
				}
				return
			}
			if err == nil {
				t.Fatalf("Decode accepted %s", tc.in)
			}
			if !errors.Is(err, ErrInvalidJob) {
				t.Errorf("error %v does not wrap ErrInvalidJob", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// Every node names a relay's sweep job alike, whatever URL spelling the
// event used: that is what the queue's dedup collapses.
func TestSweepJob(t *testing.T) {
	from := strings.Repeat("cd", 32)
	a, err := SweepJob("wss://R.example:443/", "nip65", from)
	if err != nil {
		t.Fatal(err)
	}
	b, err := SweepJob("WSS://r.example", "hint", from)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != b.ID || a.Relays[0] != "wss://r.example" || !ValidID(a.ID) {
		t.Errorf("ids %q and %q for one relay (%q)", a.ID, b.ID, a.Relays[0])
	}
	if c, _ := SweepJob("wss://s.example", "nip65", from); c.ID == a.ID {
		t.Error("two relays share a sweep id")
	}
	if _, err := SweepJob("https://r.example", "nip65", from); !errors.Is(err, ErrInvalidJob) {
		t.Errorf("http URL: %v", err)
	}
	w := &Worker{opts: WorkerOptions{SplitThreshold: 1, Now: func() time.Time { return time.Unix(1e9, 0) }}}
	if w.shouldSplit(a) {
		t.Error("a sweep job of a whole history is split")
	}
}

func TestDecodeDefaults(t *testing.T) {
	j, err := Decode([]byte(`{"id":"j","relays":["r.example"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if j.Priority != DefaultPriority || j.Mode != ModeBackfill {
		t.Errorf("defaults: priority %d mode %q", j.Priority, j.Mode)
	}
	j, err = Decode([]byte(`{"id":"j","relays":["r.example"],"priority":0}`))
	if err != nil || j.Priority != 0 {
		t.Errorf("explicit priority 0: %v, %d", err, j.Priority)
	}
}

func TestValidatePrivateTargets(t *testing.T) {
	dns := map[string][]netip.Addr{
		"public.example":    {netip.MustParseAddr("93.184.216.34")},
		"rebind.example":    {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("10.1.2.3")},
		"v6local.example":   {netip.MustParseAddr("fe80::1")},
		"cgnat.example":     {netip.MustParseAddr("100.64.3.4")},
		"public6.example":   {netip.MustParseAddr("2606:4700::1")},
		"localhost":         {netip.MustParseAddr("127.0.0.1")},
		"noaddress.example": {},
	}
	resolve := func(_ context.Context, host string) ([]netip.Addr, error) {
		a, ok := dns[host]
		if !ok {
			return nil, errors.New("no such host")
		}
		return a, nil
	}
	tests := []struct {
		relay   string
		private bool // refused unless allowPrivate
		bad     bool // refused even with allowPrivate
	}{
		{relay: "public.example"},
		{relay: "wss://public6.example"},
		{relay: "wss://93.184.216.34:443"},
		{relay: "ws://127.0.0.1:7777", private: true},
		{relay: "ws://[::1]:80", private: true},
		{relay: "ws://[::ffff:10.0.0.1]", private: true},
		{relay: "192.168.1.1", private: true},
		{relay: "169.254.169.254", private: true},
		{relay: "0.0.0.0", private: true},
		{relay: "localhost", private: true},
		{relay: "rebind.example", private: true},
		{relay: "v6local.example", private: true},
		{relay: "cgnat.example", private: true},
		{relay: "nosuch.example", private: true},
		{relay: "noaddress.example", private: true},
		{relay: "ftp://public.example", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.relay, func(t *testing.T) {
			j := &Job{ID: "j", Relays: []string{tc.relay}, Mode: ModeBackfill, Priority: 5, Resolve: resolve}
			err := j.Validate(false)
			if refused := err != nil; refused != (tc.private || tc.bad) {
				t.Errorf("Validate(false) = %v", err)
			}
			err = j.Validate(true)
			if refused := err != nil; refused != tc.bad {
				t.Errorf("Validate(true) = %v", err)
			}
			if err != nil && !errors.Is(err, ErrInvalidJob) {
				t.Errorf("error %v does not wrap ErrInvalidJob", err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"id":"j1","relays":["relay.example.com"],"filter":{"kinds":[1],"since":1,"until":2},"mode":"backfill","priority":3}`))
	f.Add([]byte(`{"id":"p/s3","parent":"p","shard":{"since":10,"until":20},"relays":["r.example"]}`))
	f.Add([]byte(`{"id":"x","relays":["wss://a"],"mode":"live"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidJob) {
				t.Fatalf("error %v does not wrap ErrInvalidJob", err)
			}
			return
		}
		// What decodes is a job a worker can key and run.
		if j.Parent == "" && !ValidID(j.ID) || len(j.Relays) == 0 || (j.Mode != ModeBackfill && j.Mode != ModeLive) {
			t.Fatalf("accepted %+v", j)
		}
		if err := j.check(); err != nil {
			t.Fatalf("decoded job fails its own check: %v", err)
		}
	})
}
