package crawl

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode"
)

// NormalizeURL checks a relay address as users type it and turns it into
// the relay's one WebSocket URL: "wss://host", "ws://host:port", a path
// if the relay has one, or a bare "host" (meaning wss://host). The scheme
// and host are lowercased and a lone trailing slash dropped, so one relay
// has one name in the archive. The error says what is wrong in one
// sentence, before anything is dialed or stored: the CLI, the daemon's
// configuration and the job queue all check relays here.
func NormalizeURL(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", &URLError{URL: s, Reason: "empty"}
	}
	if i := strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return "", &URLError{URL: s, Reason: "contains a space or control character"}
	}
	typed := s
	if !strings.Contains(s, "://") {
		s = "wss://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the *url.Error repeats the URL
		}
		return "", &URLError{URL: typed, Reason: err.Error()}
	}
	switch u.Scheme = strings.ToLower(u.Scheme); u.Scheme {
	case "ws", "wss":
	case "http", "https":
		alt := "wss"
		if u.Scheme == "http" {
			alt = "ws"
		}
		return "", &URLError{URL: typed, Reason: fmt.Sprintf("a relay is reached over WebSocket: write %s://%s", alt, s[len(u.Scheme)+3:])}
	default:
		return "", &URLError{URL: typed, Reason: fmt.Sprintf("scheme %q is not ws or wss", u.Scheme)}
	}
	switch {
	case u.Opaque != "" || u.Hostname() == "":
		return "", &URLError{URL: typed, Reason: "no host: want [ws[s]://]host[:port][/path]"}
	case u.User != nil:
		return "", &URLError{URL: typed, Reason: "a relay URL carries no user or password"}
	case u.Fragment != "" || strings.HasSuffix(s, "#"):
		return "", &URLError{URL: typed, Reason: "a relay URL has no #fragment"}
	}
	if p := u.Port(); p != "" || strings.HasSuffix(u.Host, ":") {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", &URLError{URL: typed, Reason: fmt.Sprintf("port %q is not a number from 1 to 65535", p)}
		}
	}
	u.Host = strings.ToLower(u.Host)
	if u.Path == "/" {
		u.Path = ""
	}
	return u.String(), nil
}

// URLError is a relay address NormalizeURL refuses.
type URLError struct {
	URL    string // as typed
	Reason string // one sentence, without the URL
}

func (e *URLError) Error() string {
	if e.URL == "" {
		return "empty relay URL"
	}
	return fmt.Sprintf("relay URL %q: %s", e.URL, e.Reason)
}
