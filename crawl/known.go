package crawl

import (
	"bytes"
	"errors"
	"maps"
	"slices"

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

// observe adds the pubkeys of items while there is room.
func (k knownAuthors) observe(items []relayconn.Item) {
	for _, it := range items {
		if len(k) >= maxKnownAuthors {
			return
		}
		if pk, ok := pubkeyOf(it.Raw); ok {
			k[pk] = struct{}{}
		}
	}
}

var pubkeyKey = []byte(`"pubkey":"`)

// pubkeyOf finds an event's pubkey without parsing it. Quotes inside
// strings are escaped, so the key can only be a real key; a nested
// object's "pubkey" would give a wrong guess, which only costs a query.
func pubkeyOf(raw []byte) (string, bool) {
	i := bytes.Index(raw, pubkeyKey)
	if i < 0 || len(raw) < i+len(pubkeyKey)+64 {
		return "", false
	}
	pk := string(raw[i+len(pubkeyKey) : i+len(pubkeyKey)+64])
	return pk, ValidAuthor(pk)
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
