package crawl

import "testing"

func TestNormalizeURL(t *testing.T) {
	for in, want := range map[string]string{
		"relay.damus.io":          "wss://relay.damus.io",
		"  Relay.Damus.IO/ ":      "wss://relay.damus.io",
		"wss://nos.lol":           "wss://nos.lol",
		"ws://127.0.0.1:7447":     "ws://127.0.0.1:7447",
		"WS://127.0.0.1:7447/":    "ws://127.0.0.1:7447",
		"https://relay.example/x": "wss://relay.example/x",
		"localhost:7000":          "wss://localhost:7000",
	} {
		got, err := NormalizeURL(in)
		if err != nil || got != want {
			t.Errorf("NormalizeURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "ftp://x", "wss://", "wss://user:pw@host"} {
		if got, err := NormalizeURL(bad); err == nil {
			t.Errorf("NormalizeURL(%q) = %q, want error", bad, got)
		}
	}
}
