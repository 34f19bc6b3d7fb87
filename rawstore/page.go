package rawstore

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nostr-archiver/archiver/event"
)

// A query reads its candidates in pages. Index order (newest first) is
// random in id order, so reading each candidate's verdict and body with a
// Get of its own costs a fresh lookup through every level and, for the
// body, a blob value block read and decompressed for one value (76% of a
// bulk REQ's CPU in Pebble's getInternal). A page of index entries is
// instead looked up in id order through two iterators reused for the
// whole query, whose seeks go forward and keep their blocks: the verdicts,
// then the bodies of the valid ones, copied aside, then the page is
// passed on in index order.
var (
	// pageKeys bounds the index entries a query holds ahead, shared by
	// its filters.
	pageKeys = 4096
	// pageBytes bounds the event bytes a query holds ahead, shared by its
	// filters: a body past a page's share is read alone when its turn
	// comes, as before pages.
	pageBytes = 4 << 20
)

// entry states, once the page is loaded.
const (
	entrySkip  = iota // not valid: pending (a replaced damaged primary), invalid, or damaged
	entryValid        // valid; its body is arena[off:end] (unless keys only)
	entryLater        // valid; its body was past the byte share, to read when its turn comes
)

type pageEntry struct {
	key      [indexSuffixLen]byte
	off, end int
	state    uint8
}

// page is a stream's read-ahead: entries in index order, pos the next.
type page struct {
	ents  []pageEntry
	pos   int
	order []int // ents by id, for the lookups
	arena []byte
}

// pages keeps pages for the next queries: a REQ's page is as long as its
// limit, and growing its buffers anew for each one cost a fifth of the
// CPU of a 500-event REQ.
var pages = sync.Pool{New: func() any { return new(page) }}

func getPage() *page { return pages.Get().(*page) }

func putPage(p *page) {
	if p == nil {
		return
	}
	p.ents, p.order, p.arena, p.pos = p.ents[:0], p.order[:0], p.arena[:0], 0
	pages.Put(p)
}

// readers are the query's iterators over the verdicts and the bodies, on
// one snapshot: a damaged primary's replacement deletes its verdict and
// stores the new copy in one batch, and two reads at different moments
// could see the old verdict with the new, unjudged, copy.
type readers struct {
	snap     *pebble.Snapshot
	vit, eit *pebble.Iterator
	// pending is the journal's map when snap was taken: what a fold
	// since then put in a table is newer than snap (journal.go).
	pending pendingEntries
}

func (q *query) readers() (*readers, error) {
	if q.rd != nil {
		return q.rd, nil
	}
	q.s.pend.mu.RLock()
	snap := q.s.db.NewSnapshot()
	pending := q.s.pend.m
	q.s.pend.mu.RUnlock()
	vit, err := snap.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixVerdict}, UpperBound: []byte{prefixVerdict + 1}})
	if err != nil {
		_ = snap.Close()
		return nil, fmt.Errorf("rawstore: query: %w", err)
	}
	eit, err := snap.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEvent}, UpperBound: []byte{prefixEvent + 1}})
	if err != nil {
		_ = vit.Close()
		_ = snap.Close()
		return nil, fmt.Errorf("rawstore: query: %w", err)
	}
	q.rd = &readers{snap: snap, vit: vit, eit: eit, pending: pending}
	return q.rd, nil
}

func (r *readers) close() {
	_ = r.vit.Close()
	_ = r.eit.Close()
	_ = r.snap.Close()
}

// loadPage looks up the verdicts of p's entries and, unless keysOnly,
// the bodies of the valid ones (up to maxBytes of them), in id order.
func (q *query) loadPage(p *page, keysOnly bool, maxBytes int) error {
	rd, err := q.readers()
	if err != nil {
		return err
	}
	p.order = p.order[:0]
	for i := range p.ents {
		p.order = append(p.order, i)
	}
	slices.SortFunc(p.order, func(a, b int) int { return bytes.Compare(p.ents[a].key[8:], p.ents[b].key[8:]) })
	p.arena = p.arena[:0]
	vk, ek := [1 + idLen]byte{prefixVerdict}, [1 + idLen]byte{prefixEvent}
	for _, i := range p.order {
		en := &p.ents[i]
		en.state = entrySkip
		copy(vk[1:], en.key[8:])
		valid, err := q.seekVerdict(rd.vit, vk[:])
		if err != nil {
			return err
		}
		if !valid {
			continue
		}
		switch {
		case keysOnly:
			en.state = entryValid
		case len(p.arena) >= maxBytes:
			en.state = entryLater
		default:
			copy(ek[1:], en.key[8:])
			n := len(p.arena)
			ok, err := q.seekBody(rd, ek[:], &p.arena)
			if err != nil {
				return err
			}
			if ok {
				en.state, en.off, en.end = entryValid, n, len(p.arena)
			}
		}
	}
	return nil
}

// seekVerdict reports whether the verdict at vk says valid; a missing
// verdict (pending) or a damaged one (noted) is not.
func (q *query) seekVerdict(it *pebble.Iterator, vk []byte) (bool, error) {
	if !it.SeekPrefixGE(vk) || !bytes.Equal(it.Key(), vk) {
		if err := it.Error(); err != nil {
			return false, q.skipDamaged(it, vk, err, "read verdict")
		}
		return false, nil
	}
	v, err := value(it)
	var valid bool
	if err == nil {
		valid, _, _, err = decodeVerdict(vk, v)
	}
	if err != nil {
		return false, q.skipDamaged(it, vk, err, "read verdict")
	}
	return valid, nil
}

// seekBody appends the raw event at ek, which has a valid verdict, to
// arena; false if it is damaged (noted).
func (q *query) seekBody(rd *readers, ek []byte, arena *[]byte) (bool, error) {
	it := rd.eit
	v, pending := q.s.pendingIn(rd.pending, (*[32]byte)(ek[1:]))
	var err error
	switch {
	case pending:
	case !it.SeekPrefixGE(ek) || !bytes.Equal(it.Key(), ek):
		err := it.Error()
		if err == nil {
			err = corrupt(ek, errors.New("valid verdict without its event"))
		}
		return false, q.skipDamaged(it, ek, err, "read event")
	default:
		v, err = value(it)
	}
	var raw []byte
	if err == nil {
		_, raw, err = q.s.decodeEvent(ek, v)
	}
	if err != nil {
		return false, q.skipDamaged(it, ek, err, "read event")
	}
	*arena = append(*arena, raw...)
	return true, nil
}

// skipDamaged notes a damaged record at key, and lets it seek on; any
// other error is returned.
func (q *query) skipDamaged(it *pebble.Iterator, key []byte, err error, what string) error {
	var ce *CorruptError
	if !errors.As(err, &ce) {
		err = corruptIf(key, err)
	}
	if q.bad(err) {
		unexhaust(it, key)
		return nil
	}
	return fmt.Errorf("rawstore: query: %s %x: %w", what, key[1:9], err)
}

// parse returns the valid event raw stored at ek (id: ek's), or nil if it
// does not parse as that id (noted as damage).
func (q *query) parse(ek, raw []byte) *event.Event {
	e, err := event.Parse(raw)
	if err == nil && !bytes.Equal(e.ID[:], ek[1:]) {
		err = errors.New("id differs")
	}
	if err != nil {
		q.bad(corrupt(ek, fmt.Errorf("valid event does not parse: %v", err)))
		return nil
	}
	return e
}
