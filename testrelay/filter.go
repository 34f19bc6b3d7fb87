package testrelay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// filter is a NIP-01 filter restricted to what the store indexes: ids,
// authors, kinds, since, until, limit, and single-letter tag filters (#e,
// #p, ...) over the tags an Item indexes.
type filter struct {
	ids     []string
	authors []string
	authSet map[string]struct{} // authors as a set when there are many
	kinds   []int
	since   *int64
	until   *int64
	limit   *int
	tags    map[string][]string // letter -> values
}

type filterJSON struct {
	IDs     []string `json:"ids"`
	Authors []string `json:"authors"`
	Kinds   []int    `json:"kinds"`
	Since   *int64   `json:"since"`
	Until   *int64   `json:"until"`
	Limit   *int     `json:"limit"`
}

// manyAuthors is where a map beats a linear scan of author strings.
const manyAuthors = 8

func parseFilter(raw []byte) (filter, error) {
	var fj filterJSON
	if len(raw) == 0 || raw[0] != '{' {
		return filter{}, fmt.Errorf("filter is not an object")
	}
	if err := json.Unmarshal(raw, &fj); err != nil {
		return filter{}, err
	}
	if fj.Limit != nil && *fj.Limit < 0 {
		return filter{}, fmt.Errorf("negative limit %d", *fj.Limit)
	}
	f := filter{ids: fj.IDs, authors: fj.Authors, kinds: fj.Kinds, since: fj.Since, until: fj.Until, limit: fj.Limit}
	if bytes.Contains(raw, []byte(`"#`)) {
		var all map[string]json.RawMessage
		if err := json.Unmarshal(raw, &all); err != nil {
			return filter{}, err
		}
		for k, v := range all {
			if len(k) != 2 || k[0] != '#' {
				continue
			}
			var values []string
			if err := json.Unmarshal(v, &values); err != nil {
				return filter{}, fmt.Errorf("tag filter %s: %w", k, err)
			}
			if f.tags == nil {
				f.tags = map[string][]string{}
			}
			f.tags[k[1:]] = values
		}
	}
	if len(f.authors) > manyAuthors {
		f.authSet = make(map[string]struct{}, len(f.authors))
		for _, a := range f.authors {
			f.authSet[a] = struct{}{}
		}
	}
	return f, nil
}

// matchesRest reports whether it matches f's authors, kinds and tags; the
// caller has already applied ids, since and until.
// strictBounds makes f's since and until exclusive where asked, by
// moving them one second inward.
func (f *filter) strictBounds(since, until bool) {
	if since && f.since != nil {
		s := *f.since + 1
		f.since = &s
	}
	if until && f.until != nil {
		u := *f.until - 1
		f.until = &u
	}
}

func (f *filter) matchesRest(it *Item) bool {
	if f.kinds != nil && !slices.Contains(f.kinds, it.Kind) {
		return false
	}
	for letter, values := range f.tags {
		if !slices.ContainsFunc(it.Tags, func(t [2]string) bool { return t[0] == letter && slices.Contains(values, t[1]) }) {
			return false
		}
	}
	switch {
	case f.authSet != nil:
		_, ok := f.authSet[it.PubKey]
		return ok
	case f.authors != nil:
		return slices.Contains(f.authors, it.PubKey)
	}
	return true
}

// timeOnly reports whether only since/until restrict f, so that a count
// is the width of its window.
func (f *filter) timeOnly() bool {
	return f.ids == nil && f.authors == nil && f.kinds == nil && f.tags == nil
}

// effectiveLimit applies DefaultLimit and MaxLimit; negative means none.
func (f *filter) effectiveLimit(o *Options) int {
	lim := o.DefaultLimit
	if f.limit != nil {
		lim = *f.limit
	}
	if o.MaxLimit > 0 && (lim < 0 || lim > o.MaxLimit) {
		lim = o.MaxLimit
	}
	return lim
}
