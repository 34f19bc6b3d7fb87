package rawstore

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// keyFilter is the tables' bloom filter over the keys that are looked up
// one at a time (E, V, R and the store's own records). The index families
// (I, T, H: most keys of a verified archive, several per event) are only
// ever read by range scans, which no filter serves, so they are left out:
// a filter built for them was a sixth of the compactions' CPU in a
// verified crawl, and their bits crowded the cached filter blocks that the
// ingest's E lookups read. A lookup of a key left out is answered "may
// contain", so a filter is never wrong for any key.
//
// It keeps the bloom filter's name and encoding: a table written before,
// whose filter holds every key, reads the same, and so does a table
// written now by a build that filters every key (it looks up no key of
// the families left out).
type keyFilter struct{ pebble.FilterPolicy }

func newKeyFilter() keyFilter { return keyFilter{bloom.FilterPolicy(10)} }

// scanOnly reports whether key belongs to a family read only by range scans.
func scanOnly(key []byte) bool {
	if len(key) == 0 {
		return false
	}
	switch key[0] {
	case prefixIndex, prefixIDs, prefixSighting:
		return true
	}
	return false
}

func (f keyFilter) MayContain(ftype pebble.FilterType, filter, key []byte) bool {
	return scanOnly(key) || f.FilterPolicy.MayContain(ftype, filter, key)
}

func (f keyFilter) NewWriter(ftype pebble.FilterType) pebble.FilterWriter {
	return keyFilterWriter{f.FilterPolicy.NewWriter(ftype)}
}

type keyFilterWriter struct{ pebble.FilterWriter }

func (w keyFilterWriter) AddKey(key []byte) {
	if !scanOnly(key) {
		w.FilterWriter.AddKey(key)
	}
}
