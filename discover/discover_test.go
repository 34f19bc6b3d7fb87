package discover

import (
	"reflect"
	"testing"

	"github.com/nostr-archiver/archiver/event"
)

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"wss://relay.damus.io", "wss://relay.damus.io", true},
		{"wss://Relay.Damus.IO/", "wss://relay.damus.io", true},
		{"WSS://relay.example:443", "wss://relay.example", true},
		{"ws://relay.example:80/", "ws://relay.example", true},
		{"wss://relay.example:8443/nostr", "wss://relay.example:8443/nostr", true},
		{"ws://[2001:db8::1]:80", "ws://[2001:db8::1]", true},
		{" wss://relay.example ", "wss://relay.example", true},
		{"relay.example", "", false}, // a bare word in a tag is no address
		{"https://relay.example", "", false},
		{"wss://", "", false},
		{"wss://relay.example/?x=1", "", false},
		{"wss://user:pw@relay.example", "", false},
		{"", "", false},
		{"ws://::80", "", false}, // host ":" once the port is cut (found by FuzzNormalize)
	} {
		got, ok := Normalize(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Normalize(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestPrivate(t *testing.T) {
	for u, want := range map[string]bool{
		"wss://relay.example":      false,
		"wss://8.8.8.8":            false,
		"ws://127.0.0.1:7777":      true,
		"ws://localhost:7777":      true,
		"ws://[::1]":               true,
		"wss://10.1.2.3":           true,
		"wss://192.168.1.10":       true,
		"wss://169.254.0.1":        true,
		"wss://100.64.1.1":         true,
		"wss://0.0.0.0":            true,
		"wss://printer.local":      true,
		"wss://abc.onion":          true,
		"wss://nas":                true, // a single label only resolves on a local network
		"wss://relay.example.lan.": true,
	} {
		if got := Private(u); got != want {
			t.Errorf("Private(%q) = %v, want %v", u, got, want)
		}
	}
}

func TestExtract(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    event.Event
		want []Found
	}{
		{"relay list", event.Event{Kind: 10002, Tags: [][]string{
			{"r", "wss://a.example"}, {"r", "wss://B.example/", "write"}, {"r", "wss://a.example:443"},
			{"r", "ws://127.0.0.1:4869"}, {"r", "not a url"}, {"r"}, {"p", "00"}}},
			[]Found{{"wss://a.example", FromRelayList}, {"wss://b.example", FromRelayList}}},
		{"contacts", event.Event{Kind: 3, Content: `{"wss://c.example":{"read":true,"write":true}}`},
			[]Found{{"wss://c.example", FromContacts}}},
		{"contacts, content not JSON", event.Event{Kind: 3, Content: `hello`}, nil},
		{"monitor", event.Event{Kind: 30166, Tags: [][]string{{"d", "wss://d.example/"}, {"n", "clearnet"}}},
			[]Found{{"wss://d.example", FromMonitor}}},
		{"hints", event.Event{Kind: 1, Tags: [][]string{{"e", "00", "wss://e.example"}, {"p", "00", ""},
			{"a", "30023:00:x", "wss://f.example"}, {"t", "x", "wss://ignored.example"}}},
			[]Found{{"wss://e.example", FromHint}, {"wss://f.example", FromHint}}},
		{"other kinds name nothing", event.Event{Kind: 1, Tags: [][]string{{"r", "wss://g.example"}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Extract(&tc.e); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Extract = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestExtractAllKeepsPrivate(t *testing.T) {
	e := event.Event{Kind: 10002, Tags: [][]string{{"r", "ws://127.0.0.1:4869"}, {"r", "wss://a.example"}}}
	want := []Found{{"ws://127.0.0.1:4869", FromRelayList}, {"wss://a.example", FromRelayList}}
	if got := ExtractAll(&e); !reflect.DeepEqual(got, want) {
		t.Errorf("ExtractAll = %v, want %v", got, want)
	}
}

func TestFrontierBound(t *testing.T) {
	f := NewFrontier(2)
	for _, u := range []string{"wss://a.example", "wss://b.example", "wss://a.example", "wss://c.example"} {
		f.Add(&event.Event{Kind: 10002, Tags: [][]string{{"r", u}}})
	}
	got := f.List()
	if len(got) != 2 || got[0].URL != "wss://a.example" || got[0].Mentions != 2 || got[1].URL != "wss://b.example" || f.Dropped() != 1 {
		t.Fatalf("List = %+v, dropped %d", got, f.Dropped())
	}
}
