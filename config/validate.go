package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"github.com/nostr-archiver/archiver/crawl"
)

// Validate checks every value of c and reports every problem at once, as
// *FieldError values joined with errors.Join. It does no I/O: files named
// by the config are opened, and servers dialed, by whoever uses them.
func (c *Config) Validate() error { return errors.Join(c.problems()...) }

// Bounds of Limits.MaxFrameBytes: below 64KiB ordinary events (long-form
// articles, big contact lists) do not fit; above 64MiB one frame per
// in-flight REQ would dominate memory.
const (
	MinFrameBytes = 64 * KiB
	MaxFrameBytes = 64 * MiB
)

// problems collects FieldErrors.
type problems []error

func (p *problems) add(key string, value any, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	switch v := value.(type) {
	case nil:
	case string:
		msg = fmt.Sprintf("%q: %s", v, msg)
	default:
		msg = fmt.Sprintf("%v: %s", v, msg)
	}
	*p = append(*p, &FieldError{Key: key, Err: errors.New(msg)})
}

func (c *Config) problems() []error {
	var p problems
	if c.DataDir == "" {
		p.add("data_dir", nil, "must be set")
	}
	if err := checkHostPort(c.Listen); err != nil {
		p.add("listen", c.Listen, "%v", err)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		p.add("log_level", c.LogLevel, "must be debug, info, warn or error")
	}
	c.Limits.check(&p)
	if len(c.Relays) == 0 && c.NATS == nil {
		p.add("relay", nil, "no [[relay]] and no [nats]: nothing to archive")
	}
	seen := make(map[string]int, len(c.Relays))
	for i := range c.Relays {
		c.Relays[i].check(&p, i, seen)
	}
	if c.NATS != nil {
		c.NATS.check(&p)
	}
	if c.Serve != nil {
		c.Serve.check(&p, c.Listen)
	}
	c.Discover.check(&p)
	return p
}

// Bounds of Serve.MaxMessageBytes: a NIP-77 message needs a few KiB; a
// client message is held whole while parsed.
const (
	MinServeMessageBytes = 4 * KiB
	MaxServeMessageBytes = 16 * MiB
)

func (s *Serve) check(p *problems, listen string) {
	switch err := checkHostPort(s.Listen); {
	case s.Listen == "":
		p.add("serve.listen", nil, "must be set in a [serve] section")
	case err != nil:
		p.add("serve.listen", s.Listen, "%v", err)
	case s.Listen == listen && !strings.HasSuffix(listen, ":0"):
		p.add("serve.listen", s.Listen, "is also listen (/metrics): give the relay its own address")
	}
	for _, v := range []struct {
		key string
		n   int
	}{{"max_limit", s.MaxLimit}, {"max_subscriptions", s.MaxSubscriptions}, {"max_count", s.MaxCount}, {"max_sync_events", s.MaxSyncEvents}} {
		if v.n < 1 {
			p.add("serve."+v.key, v.n, "must be at least 1")
		}
	}
	if s.MaxMessageBytes < MinServeMessageBytes || s.MaxMessageBytes > MaxServeMessageBytes {
		p.add("serve.max_message_bytes", s.MaxMessageBytes, "must be between %v and %v", MinServeMessageBytes, MaxServeMessageBytes)
	}
}

func (l *Limits) check(p *problems) {
	atLeast1 := func(key string, v int) {
		if v < 1 {
			p.add("limits."+key, v, "must be at least 1")
		}
	}
	atLeast1("max_connections", l.MaxConnections)
	atLeast1("max_connections_per_relay", l.MaxConnectionsPerRelay)
	if l.MaxConnections >= 1 && l.MaxConnectionsPerRelay > l.MaxConnections {
		p.add("limits.max_connections_per_relay", l.MaxConnectionsPerRelay,
			"exceeds limits.max_connections (%d)", l.MaxConnections)
	}
	atLeast1("max_inflight_per_conn", l.MaxInflightPerConn)
	if l.VerifyWorkers < 0 {
		p.add("limits.verify_workers", l.VerifyWorkers, "must be 0 (one per CPU) or more")
	}
	if l.MaxFrameBytes < MinFrameBytes || l.MaxFrameBytes > MaxFrameBytes {
		p.add("limits.max_frame_bytes", l.MaxFrameBytes, "must be between %v and %v", MinFrameBytes, MaxFrameBytes)
	}
	positive := func(key string, d Duration) {
		if d <= 0 {
			p.add("limits."+key, d, "must be positive")
		}
	}
	positive("page_timeout", l.PageTimeout)
	positive("stop_timeout", l.StopTimeout)
	atLeast1("max_dials", l.MaxDials)
	atLeast1("dials_per_second", l.DialsPerSecond)
	positive("backoff_min", l.BackoffMin)
	if l.MetricsRelays < 0 {
		p.add("limits.metrics_relays", l.MetricsRelays, "must not be negative")
	}
	if l.BackoffMax < l.BackoffMin {
		p.add("limits.backoff_max", l.BackoffMax, "must be at least limits.backoff_min (%v)", l.BackoffMin)
	}
}

func (d *Discover) check(p *problems) {
	if d.MaxRelays < 1 {
		p.add("discover.max_relays", d.MaxRelays, "must be at least 1")
	}
	for key, hosts := range map[string][]string{"discover.allow": d.Allow, "discover.deny": d.Deny} {
		for i, h := range hosts {
			if h == "" || strings.ContainsAny(h, ":/ ") || h != strings.ToLower(h) {
				p.add(fmt.Sprintf("%s[%d]", key, i), h, "must be a lowercase host name (no scheme, port or path)")
			}
		}
	}
}

// Admits reports whether the relay at host (lowercase) passes the allow
// and deny lists: a list entry names the host or a domain above it.
func (d *Discover) Admits(host string) bool {
	under := func(list []string) bool {
		for _, h := range list {
			if host == h || strings.HasSuffix(host, "."+h) {
				return true
			}
		}
		return false
	}
	return !under(d.Deny) && (len(d.Allow) == 0 || under(d.Allow))
}

// check validates relay i; seen maps the normalized URLs of the relays
// before it to their index.
func (r *Relay) check(p *problems, i int, seen map[string]int) {
	key := func(name string) string { return fmt.Sprintf("relay[%d].%s", i, name) }
	var bad *crawl.URLError
	if r.URL == "" {
		p.add(key("url"), nil, "must be set")
	} else if u, err := crawl.NormalizeURL(r.URL); errors.As(err, &bad) {
		p.add(key("url"), r.URL, "%s", bad.Reason)
	} else if err != nil {
		p.add(key("url"), r.URL, "%v", err)
	} else if j, dup := seen[u]; dup {
		p.add(key("url"), r.URL, "same relay as relay[%d]", j)
	} else {
		seen[u] = i
	}
	if r.Since != 0 && r.Until != 0 && r.Until <= r.Since {
		p.add(key("until"), r.Until, "must be after since (%d)", r.Since)
	}
	if r.Until != 0 && r.Live {
		p.add(key("until"), r.Until, "a live relay has no end: remove until or set live = false")
	}
	for j, k := range r.Kinds {
		if k < 0 || k > 65535 {
			p.add(fmt.Sprintf("relay[%d].kinds[%d]", i, j), k, "must be between 0 and 65535")
		}
	}
	if len(r.Authors) > crawl.MaxAuthors {
		p.add(key("authors"), nil, "%d authors, more than %d (every REQ names them all)", len(r.Authors), crawl.MaxAuthors)
	}
	for j, a := range r.Authors {
		if !isLowerHex(a, 64) {
			p.add(fmt.Sprintf("relay[%d].authors[%d]", i, j), a, "must be 64 lowercase hex characters")
		}
	}
	if r.Live && r.CatchupInterval <= 0 {
		p.add(key("catchup_interval"), r.CatchupInterval, "must be positive")
	}
	if r.RecheckInterval < 0 {
		p.add(key("recheck_interval"), r.RecheckInterval, "must not be negative (0 turns it off)")
	}
	if r.TailOverlap < 0 {
		p.add(key("tail_overlap"), r.TailOverlap, "must not be negative")
	}
}

func (n *NATS) check(p *problems) {
	var methods []string
	if n.URL == "" {
		p.add("nats.url", nil, "must be set in a [nats] section")
	} else {
		urlCreds := false
		for s := range strings.SplitSeq(n.URL, ",") {
			s = strings.TrimSpace(s)
			hasUser, err := checkNATSURL(s)
			if err != nil {
				p.add("nats.url", s, "%v", err)
			}
			urlCreds = urlCreds || hasUser
		}
		if urlCreds {
			methods = append(methods, "credentials in nats.url")
		}
	}
	if !validName(n.Stream, ".*>/\\") {
		p.add("nats.stream", n.Stream, "must be a JetStream name: not empty, no spaces, '.', '*', '>', '/' or '\\'")
	}
	if !validSubject(n.SubjectPrefix) {
		p.add("nats.subject_prefix", n.SubjectPrefix, "must be a subject without wildcards: dot-separated non-empty tokens without spaces, '*' or '>'")
	}
	switch {
	case n.User != "" && n.Password != "":
		methods = append(methods, "nats.user/nats.password")
	case n.User != "":
		p.add("nats.password", nil, "must be set with nats.user")
	case n.Password != "":
		p.add("nats.user", nil, "must be set with nats.password")
	}
	for _, m := range []struct{ key, v string }{
		{"nats.token", n.Token}, {"nats.nkey_seed_file", n.NkeySeedFile}, {"nats.creds_file", n.CredsFile},
	} {
		if m.v != "" {
			methods = append(methods, m.key)
		}
	}
	if len(methods) > 1 {
		p.add("nats", nil, "conflicting authentication: %s; set at most one", strings.Join(methods, ", "))
	}
	if (n.TLSCert == "") != (n.TLSKey == "") {
		p.add("nats.tls_cert", nil, "nats.tls_cert and nats.tls_key must be set together")
	}
	if n.MaxConcurrentJobs < 1 {
		p.add("nats.max_concurrent_jobs", n.MaxConcurrentJobs, "must be at least 1")
	}
}

// checkNATSURL checks one server URL of nats.url and reports whether it
// carries credentials.
func checkNATSURL(s string) (hasUser bool, err error) {
	if !strings.Contains(s, "://") {
		s = "nats://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return false, errors.Unwrap(err)
	}
	switch strings.ToLower(u.Scheme) {
	case "nats", "tls", "ws", "wss":
	default:
		return false, errors.New("scheme must be nats, tls, ws or wss")
	}
	if u.Hostname() == "" {
		return false, errors.New("want [scheme://]host[:port]")
	}
	if u.Port() != "" {
		if err := checkPort(u.Port()); err != nil {
			return false, err
		}
	}
	return u.User != nil, nil
}

// checkHostPort accepts host:port, [ipv6]:port and :port.
func checkHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("must be host:port")
	}
	return checkPort(port)
}

func checkPort(s string) error {
	if _, err := strconv.ParseUint(s, 10, 16); err != nil {
		return fmt.Errorf("port %q must be a number from 0 to 65535", s)
	}
	return nil
}

func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// validName reports whether s is non-empty, printable, without spaces and
// without any of the bytes in forbidden.
func validName(s, forbidden string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) || strings.ContainsRune(forbidden, r) {
			return false
		}
	}
	return true
}

// validSubject reports whether s is a literal NATS subject: dot-separated
// tokens, none empty, none a wildcard.
func validSubject(s string) bool {
	if s == "" {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if !validName(tok, "*>") {
			return false
		}
	}
	return true
}
