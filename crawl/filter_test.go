package crawl

import (
	"strings"
	"testing"

	"github.com/nostr-archiver/archiver/rawstore"
)

func TestFilterKey(t *testing.T) {
	a, b := strings.Repeat("a", 64), strings.Repeat("b", 64)
	key := func(kinds []int, authors []string) string {
		return (&Options{Kinds: kinds, Authors: authors}).filterKey()
	}
	if k := key(nil, nil); k != "" {
		t.Errorf("no filter: key %q, want \"\" (the keys archives already hold)", k)
	}
	same := [][2]string{
		{key([]int{1, 7}, nil), key([]int{7, 1, 7}, nil)},
		{key(nil, []string{a, b}), key(nil, []string{b, a, a})},
		{key([]int{1}, []string{a}), key([]int{1}, []string{a})},
	}
	for i, p := range same {
		if p[0] != p[1] || p[0] == "" {
			t.Errorf("case %d: %q and %q, want one non-empty key", i, p[0], p[1])
		}
	}
	distinct := map[string]bool{}
	for _, k := range []string{
		key([]int{1}, nil), key([]int{7}, nil), key([]int{1, 7}, nil),
		key(nil, []string{a}), key(nil, []string{b}), key([]int{1}, []string{a}),
	} {
		if distinct[k] {
			t.Errorf("key %q names two filters", k)
		}
		distinct[k] = true
	}
}

func TestValidateFilter(t *testing.T) {
	ok := func() Options {
		o := Options{Store: new(rawstore.Store)} // never opened: Validate only needs one
		o.setDefaults()
		return o
	}
	for _, tc := range []struct {
		name string
		mod  func(*Options)
		want string // "" valid
	}{
		{"kinds and authors", func(o *Options) { o.Kinds, o.Authors = []int{0, 65535}, []string{strings.Repeat("0f", 32)} }, ""},
		{"negative kind", func(o *Options) { o.Kinds = []int{-1} }, "kind -1"},
		{"kind too big", func(o *Options) { o.Kinds = []int{65536} }, "kind 65536"},
		{"uppercase author", func(o *Options) { o.Authors = []string{strings.Repeat("AB", 32)} }, "lowercase hex"},
		{"short author", func(o *Options) { o.Authors = []string{"abcd"} }, "lowercase hex"},
		{"too many authors", func(o *Options) { o.Authors = make([]string, MaxAuthors+1) }, "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok()
			tc.mod(&o)
			err := o.Validate()
			if tc.want == "" && err != nil {
				t.Fatalf("Validate: %v, want nil", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}
