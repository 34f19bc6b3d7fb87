// Package filtertest is a brute-force NIP-01 filter matcher for tests,
// written apart from package filter and from the store's indexes so that
// it can judge them: events decoded with encoding/json, filters built as
// Go values and handed to the code under test as JSON.
package filtertest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Event is what the matcher reads of an event.
type Event struct {
	ID        string     `json:"id"`
	PubKey    string     `json:"pubkey"`
	CreatedAt int64      `json:"created_at"`
	Kind      int        `json:"kind"`
	Tags      [][]string `json:"tags"`
}

// Decode reads an event's JSON.
func Decode(raw []byte) (*Event, error) {
	e := new(Event)
	return e, json.Unmarshal(raw, e)
}

// Sort orders events as NIP-01 answers a REQ: newest first, then by id.
func Sort(all []*Event) {
	slices.SortFunc(all, func(a, b *Event) int {
		if a.CreatedAt != b.CreatedAt {
			if a.CreatedAt > b.CreatedAt {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// Filter is one NIP-01 filter; a nil field is absent.
type Filter struct {
	IDs     []string
	Authors []string
	Kinds   []int
	Tags    map[string][]string // letter -> values
	Since   *int64
	Until   *int64
	Limit   *int
}

// JSON is the filter as a client sends it.
func (f Filter) JSON() string {
	m := map[string]any{}
	if f.IDs != nil {
		m["ids"] = f.IDs
	}
	if f.Authors != nil {
		m["authors"] = f.Authors
	}
	if f.Kinds != nil {
		m["kinds"] = f.Kinds
	}
	for k, v := range f.Tags {
		m["#"+k] = v
	}
	if f.Since != nil {
		m["since"] = *f.Since
	}
	if f.Until != nil {
		m["until"] = *f.Until
	}
	if f.Limit != nil {
		m["limit"] = *f.Limit
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// JSONArray is filters as one JSON array.
func JSONArray(fs []Filter) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = f.JSON()
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Matches is NIP-01: every present field must match; an empty list
// matches nothing.
func (f Filter) Matches(e *Event) bool {
	if f.IDs != nil && !slices.Contains(f.IDs, e.ID) ||
		f.Authors != nil && !slices.Contains(f.Authors, e.PubKey) ||
		f.Kinds != nil && !slices.Contains(f.Kinds, e.Kind) ||
		f.Since != nil && e.CreatedAt < *f.Since ||
		f.Until != nil && e.CreatedAt > *f.Until {
		return false
	}
	for name, vals := range f.Tags {
		if !slices.ContainsFunc(e.Tags, func(t []string) bool { return len(t) >= 2 && t[0] == name && slices.Contains(vals, t[1]) }) {
			return false
		}
	}
	return true
}

// Brute answers filters by scanning all (in Sort order): each filter's
// limit applies to its own matches, and the union is returned once, in
// that order, as ids.
func Brute(all []*Event, fs []Filter) []string {
	in := map[string]bool{}
	for _, f := range fs {
		n := 0
		for _, e := range all {
			if f.Limit != nil && n >= *f.Limit {
				break
			}
			if f.Matches(e) {
				in[e.ID] = true
				n++
			}
		}
	}
	var out []string
	for _, e := range all {
		if in[e.ID] {
			out = append(out, e.ID)
		}
	}
	return out
}

// Latest keeps, of all (in Sort order), the latest version of each
// replaceable (0, 3, 10000-19999: per author and kind) and addressable
// (30000-39999: per author, kind and first d value) event, and every
// other event.
func Latest(all []*Event) []*Event {
	seen := map[string]bool{}
	var out []*Event
	for _, e := range all {
		var key string
		switch {
		case e.Kind == 0 || e.Kind == 3 || 10000 <= e.Kind && e.Kind < 20000:
			key = fmt.Sprint(e.PubKey, e.Kind)
		case 30000 <= e.Kind && e.Kind < 40000:
			d := ""
			for _, t := range e.Tags {
				if len(t) >= 2 && t[0] == "d" {
					d = t[1]
					break
				}
			}
			key = fmt.Sprintf("%s %d %q", e.PubKey, e.Kind, d)
		}
		if key != "" {
			if seen[key] {
				continue // Sort order: the first seen is the newest, lowest id
			}
			seen[key] = true
		}
		out = append(out, e)
	}
	return out
}
