package crawl

import (
	"fmt"
	"net/url"
	"strings"
)

// NormalizeURL turns a relay address as users type it into a WebSocket
// URL: "wss://host", "ws://host:port", or a bare "host" (meaning wss://).
// The host is lowercased and a lone trailing slash dropped, so one relay
// has one name in the archive.
func NormalizeURL(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", fmt.Errorf("empty relay URL")
	}
	if !strings.Contains(s, "://") {
		s = "wss://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("relay URL %q: %w", s, err)
	}
	switch u.Scheme = strings.ToLower(u.Scheme); u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("relay URL %q: scheme %q is not ws or wss", s, u.Scheme)
	}
	if u.Host == "" || u.User != nil {
		return "", fmt.Errorf("relay URL %q: want [ws[s]://]host[:port][/path]", s)
	}
	u.Host = strings.ToLower(u.Host)
	if u.Path == "/" {
		u.Path = ""
	}
	u.Fragment = ""
	return u.String(), nil
}
