// Package discover finds relay URLs inside events: NIP-65 relay lists
// (kind 10002 "r" tags), contact lists (kind 3 content), NIP-66 relay
// discovery events (kind 30166 "d" tags) and relay hints in "e", "p" and
// "a" tags. It is pure: what to do with the URLs (crawl them, list them)
// is the caller's.
package discover

import (
	"encoding/json"
	"net/netip"
	"net/url"
	"strings"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/event"
)

// How a URL was learned.
const (
	FromRelayList = "nip65"    // kind 10002 "r" tag
	FromContacts  = "contacts" // kind 3 content
	FromMonitor   = "nip66"    // kind 30166 "d" tag
	FromHint      = "hint"     // a relay hint in an e, p or a tag
)

// Found is one relay URL an event names.
type Found struct {
	URL string // normalized (crawl.NormalizeURL, default port dropped)
	How string
}

// Extract returns the relay URLs e names, normalized, each once. URLs
// that are not ws(s) URLs with a host, or that name a private target
// (see Private), are left out.
func Extract(e *event.Event) []Found {
	return extract(e, false)
}

// ExtractAll is Extract keeping private targets: for a caller that
// decides itself (a daemon configured to crawl a lab network).
func ExtractAll(e *event.Event) []Found {
	return extract(e, true)
}

func extract(e *event.Event, private bool) []Found {
	var out []Found
	seen := map[string]bool{}
	add := func(raw, how string) {
		u, ok := Normalize(raw)
		if !ok || seen[u] || !private && Private(u) {
			return
		}
		seen[u] = true
		out = append(out, Found{URL: u, How: how})
	}
	switch e.Kind {
	case 10002:
		for _, t := range e.Tags {
			if len(t) >= 2 && t[0] == "r" {
				add(t[1], FromRelayList)
			}
		}
	case 3:
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(e.Content), &m) == nil {
			for u := range m {
				add(u, FromContacts)
			}
		}
	case 30166:
		for _, t := range e.Tags {
			if len(t) >= 2 && t[0] == "d" {
				add(t[1], FromMonitor)
			}
		}
	}
	for _, t := range e.Tags {
		if len(t) >= 3 && (t[0] == "e" || t[0] == "p" || t[0] == "a") && t[2] != "" {
			add(t[2], FromHint)
		}
	}
	return out
}

// Normalize turns a URL found in an event into the relay's one name, or
// reports that it is not a relay URL: it must say ws:// or wss:// (a bare
// word in a tag is not an address), and the scheme's default port is
// dropped so that wss://h:443 and wss://h are one relay.
func Normalize(raw string) (string, bool) {
	raw = strings.TrimSpace(raw)
	lower := strings.ToLower(raw)
	if !strings.HasPrefix(lower, "wss://") && !strings.HasPrefix(lower, "ws://") || len(raw) > 512 {
		return "", false
	}
	n, err := crawl.NormalizeURL(raw)
	if err != nil {
		return "", false
	}
	u, err := url.Parse(n)
	if err != nil || u.RawQuery != "" {
		return "", false
	}
	// A host with a colon must be an IPv6 literal ("ws://::80" parses
	// with host ":").
	if h := u.Hostname(); h == "" || strings.Contains(h, ":") && !validAddr(h) {
		return "", false
	}
	if p := u.Port(); u.Scheme == "wss" && p == "443" || u.Scheme == "ws" && p == "80" {
		u.Host = u.Hostname()
		if strings.Contains(u.Host, ":") { // an IPv6 literal
			u.Host = "[" + u.Host + "]"
		}
	}
	return u.String(), true
}

func validAddr(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// Private reports whether a normalized relay URL names a target the
// archiver must not be sent to by what it reads: an IP literal on
// loopback, private, link-local, shared or unspecified space, localhost,
// or a name that only resolves on a local network (.local, .internal,
// .lan, .home.arpa) or over Tor (.onion). Names are not resolved here: a
// dialer that follows discovered URLs checks the addresses it resolves.
func Private(u string) bool {
	p, err := url.Parse(u)
	if err != nil {
		return true
	}
	host := strings.TrimSuffix(strings.ToLower(p.Hostname()), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		return PrivateAddr(a)
	}
	if host == "localhost" || !strings.Contains(host, ".") {
		return true
	}
	for _, s := range []string{".localhost", ".local", ".internal", ".lan", ".home.arpa", ".onion"} {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// PrivateAddr reports addresses the archiver must not be made to probe by
// what it is sent or reads: loopback, private, link-local, multicast,
// shared (RFC 6598) or unspecified.
func PrivateAddr(a netip.Addr) bool {
	a = a.Unmap()
	return !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() ||
		a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || a.IsMulticast() ||
		a.IsUnspecified() || sharedSpace.Contains(a)
}

var sharedSpace = netip.MustParsePrefix("100.64.0.0/10") // RFC 6598 carrier-grade NAT
