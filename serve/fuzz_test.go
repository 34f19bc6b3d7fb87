package serve

import (
	"encoding/json"
	"testing"
)

// FuzzHandle feeds client messages to the reader: it must never panic,
// answer each message with at most one relay message that is a JSON
// array, and never hold more subscriptions or NIP-77 reconciliations than
// their caps.
func FuzzHandle(f *testing.F) {
	for _, s := range []string{
		`["REQ","a",{"kinds":[1],"limit":5}]`, `["REQ","a"]`, `["REQ","",{}]`, `["CLOSE","a"]`, `["CLOSE"]`,
		`["COUNT","c",{"#e":["x"]}]`, `["EVENT",{"id":"x"}]`, `["EVENT",1]`, `[]`, `{}`, `["AUTH",{}]`,
		`["REQ","b",{"since":5,"until":1}]`, `["REQ","b",{"ids":["zz"]}]`, "\x00",
		`["NEG-OPEN","n",{},"6100000200"]`, `["NEG-OPEN","n",{"kind":1},"61"]`, `["NEG-OPEN","n",{},"zz"]`,
		`["NEG-MSG","n","61"]`, `["NEG-MSG","n"]`, `["NEG-CLOSE","n"]`, `["NEG-CLOSE"]`,
	} {
		f.Add([]byte(s))
	}
	s := &Server{o: Options{MaxSubs: 3}.withDefaults()}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &conn{s: s, jobs: make(chan job, 4), stop: make(chan struct{}), subs: map[string]*sub{}, negs: map[string]*negSession{}}
		for range 5 { // the same message again: ids reused, the cap reached
			c.handle(data)
			if len(c.jobs) > 1 {
				t.Fatalf("%d answers to one message", len(c.jobs))
			}
			if len(c.jobs) == 1 {
				j := <-c.jobs
				var a []json.RawMessage
				if j.frame != nil && (json.Unmarshal(j.frame, &a) != nil || len(a) < 2) {
					t.Fatalf("answer %q is not a relay message", j.frame)
				}
			}
			if len(c.subs) > s.o.MaxSubs || len(c.negs) > s.o.MaxSyncSessions {
				t.Fatalf("%d subscriptions and %d reconciliations open, caps %d and %d", len(c.subs), len(c.negs), s.o.MaxSubs, s.o.MaxSyncSessions)
			}
		}
	})
}
