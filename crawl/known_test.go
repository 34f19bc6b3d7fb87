package crawl

import (
	"strings"
	"testing"

	"github.com/nostr-archiver/archiver/relayconn"
)

func TestPubkeyOf(t *testing.T) {
	id, pk := strings.Repeat("1", 64), strings.Repeat("ab", 32)
	for _, c := range []struct {
		name, raw, want string
		ok              bool
	}{
		{"NIP-01 order", `{"id":"` + id + `","pubkey":"` + pk + `","created_at":1}`, pk, true},
		{"other order", `{"created_at":1,"id":"` + id + `","pubkey":"` + pk + `"}`, pk, true},
		{"spaces", `{"id": "` + id + `", "pubkey": "` + pk + `"}`, "", false},
		{"uppercase", `{"id":"` + id + `","pubkey":"` + strings.ToUpper(pk) + `"}`, strings.ToUpper(pk), false},
		{"cut short", `{"id":"` + id + `","pubkey":"abab"}`, "", false},
		{"none", `{"id":"` + id + `","created_at":1}`, "", false},
	} {
		got, ok := pubkeyOf([]byte(c.raw))
		if got != c.want || ok != c.ok {
			t.Errorf("%s: pubkeyOf = %q, %v; want %q, %v", c.name, got, ok, c.want, c.ok)
		}
	}
	k := knownAuthors{}
	raw := []byte(`{"id":"` + id + `","pubkey":"` + pk + `"}`)
	k.observe([]relayconn.Item{{Raw: raw}, {Raw: raw}, {Raw: []byte(`{"pubkey":"` + strings.ToUpper(pk) + `"}`)}})
	if _, ok := k[pk]; !ok || len(k) != 1 {
		t.Errorf("observe kept %v, want only %s", k, pk)
	}
}

func BenchmarkObserve(b *testing.B) {
	items := make([]relayconn.Item, 500)
	for i := range items {
		items[i].Raw = []byte(`{"id":"` + strings.Repeat("1", 64) + `","pubkey":"` + strings.Repeat(string(rune('a'+i%6)), 64) +
			`","created_at":1,"kind":1,"tags":[],"content":"` + strings.Repeat("x", 500) + `","sig":"` + strings.Repeat("2", 128) + `"}`)
	}
	for b.Loop() {
		knownAuthors{}.observe(items)
	}
}
