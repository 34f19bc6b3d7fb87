package discover

import (
	"strings"
	"testing"
)

// Normalize reads URLs from events anyone can sign: whatever it accepts
// is a ws(s) URL that normalizes to itself (one relay, one name).
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"wss://relay.damus.io", "WSS://Relay.Example:443/", "ws://[2001:db8::1]:80", "wss://a.example/p?q=1", "relay.example", "wss://", "ws://h:99999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, ok := Normalize(raw)
		if !ok {
			return
		}
		if !strings.HasPrefix(u, "ws://") && !strings.HasPrefix(u, "wss://") {
			t.Fatalf("Normalize(%q) = %q: not a ws(s) URL", raw, u)
		}
		again, ok := Normalize(u)
		if !ok || again != u {
			t.Fatalf("Normalize(%q) = %q, then %q, %v", raw, u, again, ok)
		}
		_ = Private(u) // must not panic
	})
}
