package testrelay

import (
	"encoding/json"
	"fmt"
	"slices"
)

// filter is a NIP-01 filter restricted to what the store indexes: ids,
// authors, kinds, since, until, limit. Tag filters (#e, #p, ...) are
// ignored, as a relay that does not index tags would ignore them.
type filter struct {
	ids     []string
	authors []string
	authSet map[string]struct{} // authors as a set when there are many
	kinds   []int
	since   *int64
	until   *int64
	limit   *int
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
	if len(f.authors) > manyAuthors {
		f.authSet = make(map[string]struct{}, len(f.authors))
		for _, a := range f.authors {
			f.authSet[a] = struct{}{}
		}
	}
	return f, nil
}

// matchesRest reports whether it matches f's authors and kinds; the caller
// has already applied ids, since and until.
func (f *filter) matchesRest(it *Item) bool {
	if f.kinds != nil && !slices.Contains(f.kinds, it.Kind) {
		return false
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
	return f.ids == nil && f.authors == nil && f.kinds == nil
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
