package rawstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nostr-archiver/archiver/event"
)

// The event indexes list the VALID events (the T index lists every stored
// id, valid or not) under one prefix, a byte naming the index, the indexed
// value, then ^created_at and the id: a forward scan of one value's range
// is newest first, ties by id ascending (the order NIP-01 asks for).
// They are written in the batch that records an event's valid verdict
// (or, deferred, ingested sorted before the marks that say they cover the
// valid verdicts come back: indexsort.go), so they cover the valid
// verdicts, and every valid copy of an id carries the same indexed fields
// (they are hashed into the id), so the entries are only ever added. ResetVerdicts forgets every verdict and drops the
// indexes. One verdict is taken back alone: a damaged primary replaced by
// a fresh copy (Ingest) loses its verdict while its entries remain (its
// body cannot be read to find them), so a reader of the indexes checks
// the verdict (Query, QueryIDs).
const prefixIndex = 'I'

const (
	idxTime   = 'c' // I|c|^created_at|id
	idxKind   = 'k' // I|k|kind(2)|^created_at|id
	idxAuthor = 'a' // I|a|pubkey(32)|^created_at|id
	idxTag    = 't' // I|t|letter|len(1)|value|^created_at|id
	// I|p|pubkey(32)|kind(2)|^created_at|id: "kind K by these authors"
	// (profiles, contact and relay lists: the commonest REQ) reads only
	// what it returns instead of every event of the authors.
	idxAuthorKind = 'p'
)

// MaxIndexedTagValue is the longest tag value indexed: longer values
// (rare, never ids or keys) are not, and a filter asking for one is
// answered from another index, checking the tag on each candidate.
const MaxIndexedTagValue = 254

// hexTagLen, in a tag key's length byte, says the value was 64 lowercase
// hex characters (an e or p tag: most tags) stored as its 32 bytes,
// which halves those keys (100k-event benchmark: indexes 434 -> 352 B
// per event on disk).
const hexTagLen = 255

// indexSuffixLen is ^created_at|id, the tail of every index key.
const indexSuffixLen = 8 + idLen

// indexMarkKey, when present, says the indexes cover every valid verdict.
// A store with no verdict at all gets it when opened for writing; an older
// archive gets it from BuildIndexes, which keeps its progress in
// indexBuildKey (the last id indexed) so that it resumes.
var (
	indexMarkKey  = []byte{prefixInternal, 'i', 'n', 'd', 'e', 'x', 'e', 's'}
	indexBuildKey = []byte{prefixInternal, 'i', 'n', 'd', 'e', 'x', '-', 'b', 'u', 'i', 'l', 'd'}
)

func appendIndexSuffix(k []byte, createdAt int64, id *[32]byte) []byte {
	k = binary.BigEndian.AppendUint64(k, ^uint64(createdAt))
	return append(k, id[:]...)
}

func timeIndexPrefix() []byte { return []byte{prefixIndex, idxTime} }

func kindIndexPrefix(kind int) []byte {
	return binary.BigEndian.AppendUint16([]byte{prefixIndex, idxKind}, uint16(kind))
}

func authorIndexPrefix(pk *[32]byte) []byte {
	return append([]byte{prefixIndex, idxAuthor}, pk[:]...)
}

func authorKindIndexPrefix(pk *[32]byte, kind int) []byte {
	k := append([]byte{prefixIndex, idxAuthorKind}, pk[:]...)
	return binary.BigEndian.AppendUint16(k, uint16(kind))
}

// tagIndexPrefix returns nil for a value too long to be indexed.
func tagIndexPrefix(letter byte, value string) []byte {
	return valueIndexPrefix(idxTag, letter, value)
}

// valueIndexPrefix is I|idx|letter|len|value, a hex id or key as its 32
// bytes; nil for a value too long to be indexed.
func valueIndexPrefix(idx, letter byte, value string) []byte {
	k := make([]byte, 0, 4+min(len(value), MaxIndexedTagValue))
	k = append(k, prefixIndex, idx, letter)
	var raw [32]byte
	switch {
	case len(value) == 64 && event.DecodeHex32(&raw, []byte(value)) == nil:
		return append(append(k, hexTagLen), raw[:]...)
	case len(value) > MaxIndexedTagValue:
		return nil
	}
	return append(append(k, byte(len(value))), value...)
}

// indexEvent adds e's index entries to b.
func indexEvent(b *pebble.Batch, e *event.Event) {
	for _, k := range indexKeys(nil, e) {
		_ = b.Set(k, nil, nil)
	}
}

// indexKeys appends e's index keys to keys.
func indexKeys(keys [][]byte, e *event.Event) [][]byte {
	set := func(p []byte) { keys = append(keys, appendIndexSuffix(p, e.CreatedAt, &e.ID)) }
	set(timeIndexPrefix())
	set(kindIndexPrefix(e.Kind))
	set(authorIndexPrefix(&e.PubKey))
	set(authorKindIndexPrefix(&e.PubKey, e.Kind))
	for _, t := range e.Tags {
		if len(t) >= 2 && len(t[0]) == 1 && isTagLetter(t[0][0]) {
			if p := tagIndexPrefix(t[0][0], t[1]); p != nil {
				set(p) // a repeated tag sets the same key: harmless
			}
		}
	}
	if e.Kind == kindDeletion {
		deletionKeys(set, e)
	}
	return keys
}

func isTagLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// IndexKeys returns the index keys of e, an event judged valid, for
// Verdict.Index.
func IndexKeys(e *event.Event) [][]byte { return indexKeys(nil, e) }

// index indexes raw, the copy of id just judged valid, by keys if the
// verifier gave them, else by parsing it. The verifier parsed it already,
// so a parse failure here means a verifier bug: the event stays valid and
// exportable whole but is left out of the indexes (logged).
func (a *applier) index(id *[32]byte, raw []byte, keys [][]byte) {
	if keys != nil {
		a.indexKeys = append(a.indexKeys, keys...)
		return
	}
	e, err := event.Parse(raw)
	if err != nil || e.ID != *id {
		a.s.opts.Logger.Sugar().Errorf("rawstore: valid event %x does not parse (%v): not indexed", id[:8], err)
		return
	}
	a.indexKeys = indexKeys(a.indexKeys, e)
}

// setIndexKeys adds the index keys collected to the batch in key order:
// Pebble's memtable inserts a batch key by key, and a key next to the
// previous one is found from where that one went; in event order they
// are all over the key space (measured: applying 100k verdicts with
// their index entries took 2.66 CPU-s unsorted, 1.42 sorted).
func (a *applier) setIndexKeys() error {
	if a.s.isort != nil {
		return a.s.isort.add(a.indexKeys)
	}
	slices.SortFunc(a.indexKeys, bytes.Compare)
	for _, k := range a.indexKeys {
		_ = a.b.Set(k, nil, nil)
	}
	return nil
}

// IndexesReady reports whether the indexes cover every valid event, so
// that Query answers completely.
func (s *Store) IndexesReady() (bool, error) {
	ok, err := s.getOK(indexMarkKey)
	if err != nil {
		return false, fmt.Errorf("rawstore: read index mark: %w", err)
	}
	if ok {
		return true, nil
	}
	// No verdict at all: nothing to index.
	last, err := s.lastKey([]byte{prefixVerdict})
	return last == nil && err == nil, err
}

// markIndexesIfEmpty marks a writable store with no verdicts yet as
// indexed (called at Open), so that new archives never need a build.
func (s *Store) markIndexesIfEmpty() error {
	last, err := s.lastKey([]byte{prefixVerdict})
	if err != nil || last != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, k := range [][]byte{indexMarkKey, deletionMarkKey} {
		if ok, err := s.getOK(k); err != nil || !ok {
			_ = b.Set(k, nil, nil)
		}
	}
	if b.Empty() {
		return nil
	}
	return s.gate("mark indexes", 0, func() error { return b.Commit(pebble.Sync) })
}

// BuildIndexes indexes every valid event of an archive from before the
// indexes, and marks them complete; of an archive indexed before the
// deletion index, it indexes the deletion requests (see deletion.go). It resumes where an interrupted build
// stopped; progress, if not nil, is called after each batch with the
// events indexed so far in this run. Verdicts applied meanwhile index
// themselves, so it may run alongside a verify pool.
func (s *Store) BuildIndexes(ctx context.Context, progress func(n int64)) (int64, error) {
	if ready, err := s.IndexesReady(); err != nil || ready {
		if err == nil {
			err = s.buildDeletionIndex(ctx)
		}
		return 0, err
	}
	from, err := s.get(indexBuildKey)
	if err != nil {
		return 0, fmt.Errorf("rawstore: read index build progress: %w", err)
	}
	lo := []byte{prefixVerdict}
	if len(from) == idLen {
		lo = prefixEnd(append([]byte{prefixVerdict}, from...)) // past the last id done
	}
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: []byte{prefixVerdict + 1}})
	if err != nil {
		return 0, fmt.Errorf("rawstore: build indexes: %w", err)
	}
	defer it.Close()
	var n int64
	b := s.db.NewBatch()
	defer func() { b.Close() }()
	var last []byte
	commit := func(mark bool) error {
		if last != nil {
			_ = b.Set(indexBuildKey, last, nil)
		}
		if mark {
			_ = b.Set(indexMarkKey, nil, nil)
			_ = b.Set(deletionMarkKey, nil, nil)
			_ = b.Delete(indexBuildKey, nil)
		}
		err := s.gate("build indexes", b.Len(), func() error { return b.Commit(pebble.Sync) })
		b.Close()
		b = s.db.NewBatch()
		if err == nil && progress != nil {
			progress(n)
		}
		return err
	}
	for ok := it.First(); ok; {
		k := it.Key()
		v, err := value(it)
		if err == nil && len(k) == 1+idLen {
			var valid bool
			valid, _, _, err = decodeVerdict(k, v)
			if err == nil && valid {
				var id [32]byte
				copy(id[:], k[1:])
				err = s.indexStored(b, &id)
				n++
			}
		}
		last = append(last[:0], k[1:]...)
		if err != nil {
			// Unreadable: no export can hold it either; Damage reports it.
			if !s.noteDamage(err) {
				return n, fmt.Errorf("rawstore: build indexes: %w", err)
			}
			ok = skipPast(it, k)
		} else {
			ok = it.Next()
		}
		if b.Len() > indexBuildBatch {
			if err := commit(false); err != nil {
				return n, err
			}
			if err := ctx.Err(); err != nil {
				return n, err
			}
		}
	}
	if err := it.Error(); err != nil {
		return n, fmt.Errorf("rawstore: build indexes: %w", err)
	}
	return n, commit(true)
}

// indexStored adds the index entries of the stored primary copy of id.
func (s *Store) indexStored(b *pebble.Batch, id *[32]byte) error {
	k := eventKey(id)
	v, err := s.get(k)
	if err != nil || v == nil {
		return err
	}
	_, raw, err := s.decodeEvent(k, v)
	if err != nil {
		return err
	}
	e, err := event.Parse(raw)
	if err != nil || e.ID != *id {
		return corrupt(k, fmt.Errorf("valid event does not parse: %v", err))
	}
	indexEvent(b, e)
	return nil
}

// indexBuildBatch is how many bytes of index entries BuildIndexes commits
// at a time (with its progress); tests lower it to see a build resume.
var indexBuildBatch = 4 << 20
