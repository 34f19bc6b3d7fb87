package main

import (
	"strings"
	"testing"

	"github.com/nostr-archiver/archiver/crawl"
)

// Each way a relay can be unreachable gets its own next step; a relay that
// was reached gets none.
func TestHint(t *testing.T) {
	for _, tc := range []struct {
		relay, finish, detail, want string
	}{
		{"wss://x.example", crawl.FinishUnreachable, "dial tcp: lookup x.example on 10.0.0.53:53: no such host", "typo"},
		{"ws://127.0.0.1:1", crawl.FinishUnreachable, "connect: connection refused", "check the port"},
		{"wss://127.0.0.1:7447", crawl.FinishUnreachable, "tls: first record does not look like a TLS handshake", "try ws://"},
		{"wss://x.example", crawl.FinishUnreachable, "x509: certificate is valid for y.example", "certificate"},
		{"wss://x.example", crawl.FinishUnreachable, "upgrade wss://x.example: HTTP 429 on connect", "--conns 1"},
		{"ws://x.example", crawl.FinishUnreachable, "upgrade ws://x.example: HTTP 301: bad status", "try wss://"},
		{"wss://x.example", crawl.FinishUnreachable, "i/o timeout", "the relay may be down"},
		{"wss://x.example", crawl.FinishGaveUp, "connection refused", ""},
		{"wss://x.example", crawl.FinishDrained, "", ""},
		{"wss://x.example", crawl.FinishAuthRequired, "auth-required: members only", "--auth-key-file"},
		{"wss://x.example", crawl.FinishRestricted, "restricted: not a member", "allow the pubkey"},
		{"wss://x.example", crawl.FinishAuthRejected, "invalid: wrong relay tag", "relay URL"},
	} {
		got := hint(crawl.Result{Relay: tc.relay, Finish: tc.finish, Detail: tc.detail})
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s %s %q: hint %q, want one with %q", tc.relay, tc.finish, tc.detail, got, tc.want)
		}
	}
}
