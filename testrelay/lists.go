package testrelay

import (
	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/nostr-archiver/archiver/event"
)

// Signed signs e with sk (setting its pubkey, id and sig) and returns it
// as an Item.
func Signed(sk *btcec.PrivateKey, e *event.Event) (Item, error) {
	if err := e.Sign(sk); err != nil {
		return Item{}, err
	}
	return ItemFromEvent(e), nil
}

// RelayList is a NIP-65 relay list (kind 10002) naming urls, signed by
// sk: the event discovery follows.
func RelayList(sk *btcec.PrivateKey, createdAt int64, urls ...string) (Item, error) {
	e := &event.Event{CreatedAt: createdAt, Kind: 10002}
	for _, u := range urls {
		e.Tags = append(e.Tags, []string{"r", u})
	}
	return Signed(sk, e)
}
