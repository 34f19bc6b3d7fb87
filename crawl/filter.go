package crawl

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
)

// filterJSON renders a REQ filter.
type filterJSON struct {
	IDs     []string `json:"ids,omitempty"`
	Kinds   []int    `json:"kinds,omitempty"`
	Authors []string `json:"authors,omitempty"`
	Since   *int64   `json:"since,omitempty"`
	Until   *int64   `json:"until,omitempty"`
	Limit   int      `json:"limit,omitempty"`
	// Tag filters (NIP-01 #<letter>) a wall's split may narrow by.
	TagE []string `json:"#e,omitempty"`
	TagP []string `json:"#p,omitempty"`
	TagT []string `json:"#t,omitempty"`
}

// withTag narrows f to events with a tag letter (e, p or t) holding one
// of values; other letters are not split by.
func (f filterJSON) withTag(letter string, values []string) filterJSON {
	switch letter {
	case "e":
		f.TagE = values
	case "p":
		f.TagP = values
	case "t":
		f.TagT = values
	}
	return f
}

func (f filterJSON) bytes() []byte {
	b, _ := json.Marshal(f)
	return b
}

// liveOnly renders f (whose Limit is 0) with "limit": 0, which asks for
// no stored events, only those published while the subscription is open
// (NIP-01; a relay reading 0 as its default limit sends a page too, which
// dedup absorbs).
func (f filterJSON) liveOnly() []byte {
	b := f.bytes()
	if len(b) == 2 {
		return []byte(`{"limit":0}`)
	}
	return append(b[:len(b)-1], `,"limit":0}`...)
}

// jobFilter is the job's filter (kinds, authors) over since..until.
func (o *Options) jobFilter(since, until *int64, limit int) filterJSON {
	return filterJSON{Kinds: o.Kinds, Authors: o.Authors, Since: since, Until: until, Limit: limit}
}

// filterKey tells the job's filter apart in its cursor keys: "" without
// one (the keys of archives made before filters had keys), else a hash of
// its sorted kinds and authors.
func (o *Options) filterKey() string {
	if len(o.Kinds) == 0 && len(o.Authors) == 0 {
		return ""
	}
	kinds := slices.Compact(slices.Sorted(slices.Values(o.Kinds)))
	authors := slices.Compact(slices.Sorted(slices.Values(o.Authors)))
	h := sha256.New()
	fmt.Fprintf(h, "kinds %v authors %v", kinds, authors)
	return "/f" + hex.EncodeToString(h.Sum(nil)[:8])
}
