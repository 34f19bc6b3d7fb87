package crawl

import "strings"

// Machine-readable prefixes of CLOSED/OK reasons (NIP-01, NIP-42).
const (
	PrefixRateLimited  = "rate-limited"
	PrefixAuthRequired = "auth-required"
	PrefixRestricted   = "restricted"
	PrefixBlocked      = "blocked"
	PrefixInvalid      = "invalid"
	PrefixError        = "error"
	PrefixUnsupported  = "unsupported"
)

// SplitReason returns the machine-readable prefix of a CLOSED or NOTICE
// text and the rest. strfry wraps reasons as "ERROR: auth-required: ...";
// that wrapper is peeled first. A text without a known-looking prefix
// returns prefix "".
func SplitReason(s string) (prefix, msg string) {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, "ERROR: "); ok {
		if p, m, ok := cutPrefix(rest); ok {
			return p, m
		}
		return PrefixError, rest
	}
	if p, m, ok := cutPrefix(s); ok {
		return p, m
	}
	return "", s
}

func cutPrefix(s string) (string, string, bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || i > 32 {
		return "", "", false
	}
	p := strings.ToLower(s[:i])
	for _, c := range p {
		if (c < 'a' || c > 'z') && c != '-' && c != '_' {
			return "", "", false
		}
	}
	return p, strings.TrimSpace(s[i+1:]), true
}

// action is what the pager does about a refusal.
type action uint8

const (
	actRetry   action = iota // transient: back off and re-send the page
	actBackoff               // the relay asked us to slow down: back off harder, lower concurrency
	actAuth                  // needs NIP-42 auth: finish the relay with auth-required
	actGiveUp                // the relay will not serve this: finish with the reason
)

// classify maps a CLOSED or NOTICE text to an action.
func classify(text string) (action, string) {
	p, _ := SplitReason(text)
	lower := strings.ToLower(text)
	switch {
	case p == PrefixRateLimited || strings.Contains(lower, "rate limit") || strings.Contains(lower, "too many concurrent") || strings.Contains(lower, "too many subscriptions") || strings.Contains(lower, "slow down"):
		return actBackoff, p
	case p == PrefixAuthRequired:
		return actAuth, p
	case p == PrefixRestricted || p == PrefixBlocked:
		return actGiveUp, p
	}
	return actRetry, p
}
