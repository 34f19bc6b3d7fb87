package event

import (
	"bytes"
	"strings"
	"testing"

	"github.com/btcsuite/btcd/btcec/v2"
)

// benchEvents are the shapes the verify pool sees most: a short note, a
// longer note whose content needs escapes, and a contact list.
func benchEvents(b *testing.B) []struct {
	name string
	raw  []byte
} {
	sk, _ := btcec.PrivKeyFromBytes(bytes.Repeat([]byte{7}, 32))
	mk := func(e *Event) []byte {
		if err := e.Sign(sk); err != nil {
			b.Fatal(err)
		}
		return AppendJSON(nil, e)
	}
	var contacts [][]string
	for i := range 500 {
		contacts = append(contacts, []string{"p", strings.Repeat(string(rune('a'+i%6)), 64), "wss://relay.example"})
	}
	return []struct {
		name string
		raw  []byte
	}{
		{"note", mk(&Event{CreatedAt: 1700000000, Kind: 1, Tags: [][]string{{"e", "5c83da77af1dec6d7289834998ad7aafbd9e2191396d75ec3cc27f5a77226f36", "wss://relay.example"}, {"p", "f7234bd4c1394dda46d09f35bd384dd30cc552ad5541990f98844fb06676e9ca"}}, Content: "GM nostr! this is a typical short note with a link https://example.com/x and an emoji 😀"})},
		{"escaped", mk(&Event{CreatedAt: 1700000000, Kind: 1, Tags: [][]string{{"t", "nostr"}, {"r", "https://example.com/a?b=c"}}, Content: "A longer note.\n\nIt has \"quotes\", a\ttab, paragraphs and unicode: é, 日本語, 😀.\nLine three says hello to everyone reading; line four links https://example.com/some/path?q=1 and ends here.\n"})},
		{"contacts", mk(&Event{CreatedAt: 1700000000, Kind: 3, Tags: contacts, Content: ""})},
	}
}

func BenchmarkParse(b *testing.B) {
	impls := []struct {
		name  string
		parse func([]byte) (*Event, error)
	}{{"fast", Parse}, {"reference", parseReference}}
	for _, ev := range benchEvents(b) {
		for _, impl := range impls {
			b.Run(ev.name+"/"+impl.name, func(b *testing.B) {
				b.SetBytes(int64(len(ev.raw)))
				b.ReportAllocs()
				n := 0
				for b.Loop() {
					if _, err := impl.parse(ev.raw); err != nil {
						b.Fatal(err)
					}
					n++
				}
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}
