package crawl

import (
	"strings"
	"testing"
)

func TestNormalizeURL(t *testing.T) {
	for in, want := range map[string]string{
		"relay.damus.io":           "wss://relay.damus.io",
		"  Relay.Damus.IO/ ":       "wss://relay.damus.io",
		"wss://nos.lol":            "wss://nos.lol",
		"ws://127.0.0.1:7447":      "ws://127.0.0.1:7447",
		"WS://127.0.0.1:7447/":     "ws://127.0.0.1:7447",
		"wss://relay.example/x":    "wss://relay.example/x",
		"localhost:7000":           "wss://localhost:7000",
		"ws://[::1]:7447":          "ws://[::1]:7447",
		"wss://relay.example:1":    "wss://relay.example:1",
		"wss://relay.example:443/": "wss://relay.example:443",
	} {
		got, err := NormalizeURL(in)
		if err != nil || got != want {
			t.Errorf("NormalizeURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	// Each refusal names the problem (the CLI prints it as is).
	for bad, msg := range map[string]string{
		"":                          "empty relay URL",
		"   ":                       "empty relay URL",
		"not a url":                 "space",
		"wss://relay.example/a b":   "space",
		"ftp://x":                   `scheme "ftp" is not ws or wss`,
		"https://relay.example/x":   "write wss://relay.example/x",
		"http://127.0.0.1:7447":     "write ws://127.0.0.1:7447",
		"wss://":                    "no host",
		"wss:///path":               "no host",
		"ws://:7447":                "no host",
		"wss:relay.example":         "invalid port",
		"wss://user:pw@host":        "no user or password",
		"ws://127.0.0.1:99999":      `port "99999" is not a number from 1 to 65535`,
		"ws://127.0.0.1:0":          `port "0"`,
		"ws://127.0.0.1:":           `port ""`,
		"127.0.0.1:99999":           `port "99999"`,
		"ws://127.0.0.1:abc":        "invalid port",
		"wss://relay.example/#frag": "no #fragment",
		"ws://relay\x00.example":    "control character",
	} {
		got, err := NormalizeURL(bad)
		if err == nil {
			t.Errorf("NormalizeURL(%q) = %q, want an error", bad, got)
			continue
		}
		if !strings.Contains(err.Error(), msg) || strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("NormalizeURL(%q): error %q, want one line containing %q", bad, err, msg)
		}
	}
}

func FuzzNormalizeURL(f *testing.F) {
	for _, s := range []string{"relay.damus.io", "ws://127.0.0.1:7447/x", "wss://[::1]:1", "ftp://x", "ws://h:99999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := NormalizeURL(s)
		if err != nil {
			return
		}
		// A normalized URL is its own normal form.
		if again, err := NormalizeURL(u); err != nil || again != u {
			t.Fatalf("NormalizeURL(%q) = %q, but NormalizeURL(%q) = %q, %v", s, u, u, again, err)
		}
	})
}
