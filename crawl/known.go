package crawl

import (
	"bytes"
	"errors"
	"maps"
	"slices"

	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/relayconn"
)

// maxKnownAuthors bounds the authors a wall is split by beyond those it
// showed: 4096 authors are 41 REQs of 100 per full kind, a few seconds.
const maxKnownAuthors = 4096

// knownScan bounds the stored events read to fill the known-author set, so
// a big archive costs a bounded scan.
const knownScan = 200_000

// knownAuthors collects, up to maxKnownAuthors, the authors this relay's
// pages showed: the authors of a wall second that no full page showed
// usually write elsewhere on the relay too. Guarded by relayCrawl.mu.
type knownAuthors map[string]struct{}

// observe adds the pubkeys of items while there is room. An author seen
// before costs a map lookup and no allocation: a crawl calls this for
// every event.
func (k knownAuthors) observe(items []relayconn.Item) {
	for _, it := range items {
		if len(k) >= maxKnownAuthors {
			return
		}
		pk := pubkeyBytes(it.Raw)
		if pk == nil {
			continue
		}
		if _, ok := k[string(pk)]; ok {
			continue
		}
		if validHex64(pk) {
			k[string(pk)] = struct{}{}
		}
	}
}

var pubkeyKey = []byte(`"pubkey":"`)

// pubkeyAt is where the pubkey's key starts in an event serialized in
// NIP-01's order, as most are: {"id":"<64 hex>","pubkey":"...
const pubkeyAt = len(`{"id":"`) + 64 + len(`",`)

// pubkeyBytes finds an event's pubkey (64 bytes, not checked) without
// parsing it, or nil. Quotes inside strings are escaped, so the key can
// only be a real key; a nested object's "pubkey" would give a wrong guess,
// which only costs a query. The place NIP-01's order puts it is tried
// first: a search from the start was 0.3 µs per event.
func pubkeyBytes(raw []byte) []byte {
	i := pubkeyAt
	if len(raw) < i+len(pubkeyKey) || !bytes.Equal(raw[i:i+len(pubkeyKey)], pubkeyKey) {
		if i = bytes.Index(raw, pubkeyKey); i < 0 {
			return nil
		}
	}
	i += len(pubkeyKey)
	if len(raw) < i+64 {
		return nil
	}
	return raw[i : i+64]
}

// pubkeyOf is pubkeyBytes as a string, and whether it is 64 lowercase hex.
func pubkeyOf(raw []byte) (string, bool) {
	pk := pubkeyBytes(raw)
	return string(pk), pk != nil && validHex64(pk)
}

func validHex64(b []byte) bool {
	var id [32]byte
	return event.DecodeHex32(&id, b) == nil
}

var errEnough = errors.New("enough authors")

// knownAuthorList returns, sorted, the authors a wall may be split by: the
// job's authors when it names them (no other author can match), else the
// authors seen this run topped up from the archive's valid events.
func (r *relayCrawl) knownAuthorList() []string {
	if len(r.c.opts.Authors) > 0 {
		return slices.Sorted(slices.Values(r.c.opts.Authors))
	}
	r.mu.Lock()
	known := maps.Clone(r.known)
	r.mu.Unlock()
	scanned := 0
	_ = r.c.opts.Store.ForEachValid(func(_ [32]byte, raw []byte) error {
		if len(known) >= maxKnownAuthors || scanned >= knownScan {
			return errEnough
		}
		scanned++
		if pk, ok := pubkeyOf(raw); ok {
			known[pk] = struct{}{}
		}
		return nil
	})
	return slices.Sorted(maps.Keys(known))
}
