package event

import (
	"testing"

	"github.com/btcsuite/btcd/btcec/v2"
)

func BenchmarkParse(b *testing.B) {
	sk, _ := btcec.NewPrivateKey()
	e := &Event{CreatedAt: 1700000000, Kind: 1, Tags: [][]string{{"e", "5c83da77af1dec6d7289834998ad7aafbd9e2191396d75ec3cc27f5a77226f36", "wss://relay.example"}, {"p", "f7234bd4c1394dda46d09f35bd384dd30cc552ad5541990f98844fb06676e9ca"}}, Content: "GM nostr! this is a typical short note with a link https://example.com/x and an emoji 😀"}
	_ = e.Sign(sk)
	raw := AppendJSON(nil, e)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}
