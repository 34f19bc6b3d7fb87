// Package filter is the NIP-01 REQ filter: strict parsing of the JSON a
// person or a client sends, and matching one decoded event against it.
// Which stored events to look at is the store's business (rawstore.Query);
// this package only says whether one matches.
package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/nostr-archiver/archiver/event"
)

// Filter is one parsed NIP-01 filter. A nil list is an absent field (no
// constraint); an empty, non-nil list is present and matches nothing.
type Filter struct {
	IDs     [][32]byte
	Authors [][32]byte
	Kinds   []int
	// Tags maps a tag letter ('e', 'p', 't', any of a-z A-Z) to the values
	// of the "#<letter>" field: an event matches if one of its tags with
	// that name has one of them as its first value.
	Tags map[byte][]string
	// Since and Until bound created_at, both inclusive (NIP-01).
	Since, Until int64
	// Limit is at most how many events the filter returns, newest first;
	// negative: no limit.
	Limit int
}

// MaxUntil is Until when the filter sets none: created_at never exceeds it
// (the event parser refuses larger).
const MaxUntil = 1 << 53

// ErrInvalid is wrapped by every parse error.
var ErrInvalid = errors.New("invalid filter")

// Parse reads one filter object or a JSON array of them.
func Parse(raw []byte) ([]Filter, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		var objs []json.RawMessage
		if err := json.Unmarshal(raw, &objs); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if len(objs) == 0 {
			return nil, fmt.Errorf("%w: empty array of filters", ErrInvalid)
		}
		out := make([]Filter, 0, len(objs))
		for i, o := range objs {
			f, err := ParseOne(o)
			if err != nil {
				return nil, fmt.Errorf("filter %d: %w", i, err)
			}
			out = append(out, f)
		}
		return out, nil
	}
	f, err := ParseOne(raw)
	if err != nil {
		return nil, err
	}
	return []Filter{f}, nil
}

// ParseOne reads one filter object. Unknown fields are errors rather than
// ignored: a person who typed "kind" for "kinds" would otherwise get the
// whole archive.
func ParseOne(raw []byte) (Filter, error) {
	f := Filter{Until: MaxUntil, Limit: -1}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return f, fmt.Errorf("%w: not a JSON object", ErrInvalid)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return f, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	bad := func(name string, err error) error { return fmt.Errorf("%w: %q: %v", ErrInvalid, name, err) }
	// Sorted so that the first error reported does not depend on map order.
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		v := fields[name]
		var err error
		switch {
		case name == "ids":
			f.IDs, err = hexList(v)
		case name == "authors":
			f.Authors, err = hexList(v)
		case name == "kinds":
			f.Kinds, err = kindList(v)
		case name == "since":
			f.Since, err = timestamp(v)
		case name == "until":
			f.Until, err = timestamp(v)
		case name == "limit":
			var n int64
			if n, err = integer(v, math.MaxInt32); err == nil {
				f.Limit = int(n)
			}
		case len(name) == 2 && name[0] == '#' && isLetter(name[1]):
			var vals []string
			if vals, err = stringList(v); err == nil {
				if f.Tags == nil {
					f.Tags = map[byte][]string{}
				}
				f.Tags[name[1]] = vals
			}
		default:
			err = errors.New("unknown field (ids, authors, kinds, #<letter>, since, until, limit)")
		}
		if err != nil {
			return f, bad(name, err)
		}
	}
	return f, nil
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func stringList(v json.RawMessage) ([]string, error) {
	if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return nil, errors.New("null where a list was expected")
	}
	var out []string
	if err := json.Unmarshal(v, &out); err != nil {
		return nil, errors.New("not a list of strings")
	}
	return out, nil
}

// hexList reads a list of 64-character lowercase hex strings. Prefixes
// (an old NIP-01 allowance) are refused: they cannot be looked up.
func hexList(v json.RawMessage) ([][32]byte, error) {
	ss, err := stringList(v)
	if err != nil {
		return nil, err
	}
	out := make([][32]byte, len(ss))
	for i, s := range ss {
		if err := event.DecodeHex32(&out[i], []byte(s)); err != nil {
			return nil, fmt.Errorf("%q is not 64 lowercase hex characters", s)
		}
	}
	return out, nil
}

func kindList(v json.RawMessage) ([]int, error) {
	if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return nil, errors.New("null where a list was expected")
	}
	var nums []json.Number
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	if err := d.Decode(&nums); err != nil {
		return nil, errors.New("not a list of integers")
	}
	out := make([]int, len(nums))
	for i, n := range nums {
		k, err := integer(json.RawMessage(n), 65535)
		if err != nil {
			return nil, err
		}
		out[i] = int(k)
	}
	return out, nil
}

func timestamp(v json.RawMessage) (int64, error) { return integer(v, MaxUntil) }

// integer reads a non-negative JSON integer no greater than max.
func integer(v json.RawMessage, max int64) (int64, error) {
	// json.Number would also take a string holding a number.
	if v = bytes.TrimSpace(v); len(v) == 0 || v[0] == '"' {
		return 0, errors.New("not an integer")
	}
	var n json.Number
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	if err := d.Decode(&n); err != nil {
		return 0, errors.New("not an integer")
	}
	i, err := n.Int64()
	if err != nil {
		return 0, fmt.Errorf("%s is not an integer", n)
	}
	if i < 0 || i > max {
		return 0, fmt.Errorf("%d is outside 0..%d", i, max)
	}
	return i, nil
}

// Empty reports whether f can match nothing (an empty list, or since after
// until), so no store need be read.
func (f *Filter) Empty() bool {
	if f.IDs != nil && len(f.IDs) == 0 || f.Authors != nil && len(f.Authors) == 0 ||
		f.Kinds != nil && len(f.Kinds) == 0 || f.Since > f.Until || f.Limit == 0 {
		return true
	}
	for _, vs := range f.Tags {
		if len(vs) == 0 {
			return true
		}
	}
	return false
}

// Match reports whether e matches every field of f (Limit aside).
func (f *Filter) Match(e *event.Event) bool {
	if e.CreatedAt < f.Since || e.CreatedAt > f.Until {
		return false
	}
	if f.IDs != nil && !slices.Contains(f.IDs, e.ID) {
		return false
	}
	if f.Authors != nil && !slices.Contains(f.Authors, e.PubKey) {
		return false
	}
	if f.Kinds != nil && !slices.Contains(f.Kinds, e.Kind) {
		return false
	}
	for letter, vals := range f.Tags {
		if !hasTag(e.Tags, letter, vals) {
			return false
		}
	}
	return true
}

func hasTag(tags [][]string, letter byte, vals []string) bool {
	for _, t := range tags {
		if len(t) >= 2 && len(t[0]) == 1 && t[0][0] == letter && slices.Contains(vals, t[1]) {
			return true
		}
	}
	return false
}
