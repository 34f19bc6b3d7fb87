// Package nip11 fetches a relay's NIP-11 information document. The
// document is a prior for the crawler (page size, subscriptions, frame
// size), never the truth: any field may be missing or wrong, and many
// relays serve none at all.
package nip11

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Limitation is the part of the document the crawler uses.
type Limitation struct {
	MaxMessageLength int   `json:"max_message_length,omitempty"`
	MaxSubscriptions int   `json:"max_subscriptions,omitempty"`
	MaxLimit         int   `json:"max_limit,omitempty"`
	DefaultLimit     int   `json:"default_limit,omitempty"`
	MaxSubidLength   int   `json:"max_subid_length,omitempty"`
	AuthRequired     bool  `json:"auth_required,omitempty"`
	PaymentRequired  bool  `json:"payment_required,omitempty"`
	RestrictedWrites bool  `json:"restricted_writes,omitempty"`
	CreatedAtLower   int64 `json:"created_at_lower_limit,omitempty"`
	CreatedAtUpper   int64 `json:"created_at_upper_limit,omitempty"`
	MaxFilters       int   `json:"max_filters,omitempty"` // legacy, removed from NIP-11 in 2025
}

// Document is a relay information document.
type Document struct {
	Name          string     `json:"name,omitempty"`
	Software      string     `json:"software,omitempty"`
	Version       string     `json:"version,omitempty"`
	SupportedNIPs []int      `json:"supported_nips,omitempty"`
	Limitation    Limitation `json:"limitation"`
}

// Supports reports whether the document lists nip.
func (d *Document) Supports(nip int) bool {
	for _, n := range d.SupportedNIPs {
		if n == nip {
			return true
		}
	}
	return false
}

// ErrNoDocument means the relay answered but served no usable document
// (404, HTML, invalid JSON): normal, and the crawl goes on with defaults.
var ErrNoDocument = errors.New("nip11: no document")

// maxDocument bounds what is read: a document is a few KB.
const maxDocument = 1 << 20

// HTTPURL maps a relay's ws:// or wss:// URL to the http(s) URL that
// serves its document.
func HTTPURL(relay string) (string, error) {
	u, err := url.Parse(relay)
	if err != nil {
		return "", fmt.Errorf("nip11: %w", err)
	}
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	case "http", "https":
	default:
		return "", fmt.Errorf("nip11: unsupported scheme %q in %s", u.Scheme, relay)
	}
	return u.String(), nil
}

// Fetch GETs the document of relay (a ws/wss URL) with the NIP-11 Accept
// header. Lenient parsing: fields of the wrong type are an ErrNoDocument,
// unknown fields are ignored.
func Fetch(ctx context.Context, client *http.Client, relay string) (*Document, error) {
	target, err := HTTPURL(relay)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("nip11: %s: %w", relay, err)
	}
	req.Header.Set("Accept", "application/nostr+json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("nip11: fetch %s: %w", relay, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocument))
	if err != nil {
		return nil, fmt.Errorf("nip11: read %s: %w", relay, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s answered HTTP %d", ErrNoDocument, relay, resp.StatusCode)
	}
	if !strings.HasPrefix(strings.TrimSpace(string(body)), "{") {
		return nil, fmt.Errorf("%w: %s answered %q", ErrNoDocument, relay, resp.Header.Get("Content-Type"))
	}
	var doc Document
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNoDocument, relay, err)
	}
	return &doc, nil
}
