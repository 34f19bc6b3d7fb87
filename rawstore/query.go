package rawstore

import (
	"bytes"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/filter"
)

// ErrNotIndexed is returned by Query on an archive whose indexes were never
// built (see BuildIndexes).
var ErrNotIndexed = errors.New("the archive has no indexes yet")

// Query calls fn with every valid event matching any of fs, each once,
// newest first and, within a second, by id ascending; each filter's Limit
// bounds its own matches, as in a NIP-01 REQ. Each filter reads one index
// (ids, else authors with kinds, else authors, else a tag, else kinds,
// else created_at) over its
// since..until range and checks the rest of the filter on each candidate.
// Every version of a replaceable or addressable event is archived and
// returned (no latest-only); deletions (kind 5) are events like others.
//
// e and raw are valid only during the callback. A damaged record is
// skipped; the error returned at the end is then a *DamageError.
func (s *Store) Query(fs []filter.Filter, fn func(e *event.Event, raw []byte) error) error {
	return s.query(&query{s: s}, fs, func(m *matchStream) error { return fn(m.ev, m.raw) })
}

// QueryIDs is Query for the created_at and id of each match only (a
// NIP-77 set), in the same order. A filter that the index it reads
// answers exactly (since/until with at most one of ids, authors, kinds,
// authors and kinds, or one tag letter) is answered from index keys and
// verdicts, without reading an event. The verdict is still read: a damaged
// primary replaced by a fresh copy keeps its index entries while the copy
// waits for a verdict, and Query does not return it.
func (s *Store) QueryIDs(fs []filter.Filter, fn func(createdAt int64, id [32]byte) error) error {
	return s.query(&query{s: s, idsOnly: true}, fs, func(m *matchStream) error {
		return fn(int64(^binary.BigEndian.Uint64(m.cur)), [32]byte(m.cur[8:]))
	})
}

// QueryLatest is Query over the latest version of each replaceable (0, 3,
// 10000-19999: per author and kind) and addressable (30000-39999: per
// author, kind and first d tag) event, as a relay that keeps only those
// would answer: an older version never matches, even when the latest is
// outside the filter. Of versions of the same second, the lowest id is
// the latest (NIP-01).
func (s *Store) QueryLatest(fs []filter.Filter, fn func(e *event.Event, raw []byte) error) error {
	return s.query(&query{s: s, latest: true}, fs, func(m *matchStream) error { return fn(m.ev, m.raw) })
}

// QueryExcept is Query (QueryLatest if latest) leaving out the events in
// skip before the limits count them, as a relay that dropped them would
// answer (export --honor-deletions passes DeletedIDs).
func (s *Store) QueryExcept(latest bool, skip map[[32]byte]struct{}, fs []filter.Filter, fn func(e *event.Event, raw []byte) error) error {
	return s.query(&query{s: s, latest: latest, skip: skip}, fs, func(m *matchStream) error { return fn(m.ev, m.raw) })
}

func (s *Store) query(q *query, fs []filter.Filter, fn func(m *matchStream) error) error {
	ready, err := s.IndexesReady()
	if err != nil {
		return err
	}
	if !ready {
		return ErrNotIndexed
	}
	var streams []keyStream
	defer func() {
		for _, st := range streams {
			st.close()
		}
		if q.rd != nil {
			q.rd.close()
		}
	}()
	// The filters share the read-ahead (see page).
	n := 0
	for i := range fs {
		if !fs[i].Empty() {
			n++
		}
	}
	for i := range fs {
		if fs[i].Empty() {
			continue
		}
		in, exact, err := q.plan(&fs[i])
		if err != nil {
			return err
		}
		m := &matchStream{q: q, in: in, f: &fs[i], left: fs[i].Limit, keysOnly: q.idsOnly && exact,
			maxKeys: max(1, pageKeys/n), maxBytes: pageBytes / n}
		streams = append(streams, m)
		if err := m.next(); err != nil {
			return err
		}
	}
	out := newMerge(streams)
	streams = nil // out closes them now
	defer out.close()
	for out.head() != nil {
		if err := fn(out.top().(*matchStream)); err != nil {
			return err
		}
		if err := out.next(); err != nil {
			return err
		}
	}
	return q.damage.err()
}

type query struct {
	s       *Store
	latest  bool                  // see QueryLatest
	idsOnly bool                  // see QueryIDs
	skip    map[[32]byte]struct{} // see QueryExcept
	damage  damageLog
	rd      *readers // opened by the first page
}

// bad records a damaged record and reports whether err was one (skip it).
func (q *query) bad(err error) bool {
	var ce *CorruptError
	if !errors.As(err, &ce) {
		return false
	}
	q.damage.add(ce)
	q.s.noteDamage(err)
	return true
}

// plan opens the key streams of the index f reads, and reports whether
// every key it yields matches f (the rest of f constrains nothing).
func (q *query) plan(f *filter.Filter) (keyStream, bool, error) {
	if f.IDs != nil {
		st, err := q.idStream(f)
		return st, f.Authors == nil && f.Kinds == nil && f.Tags == nil, err
	}
	var prefixes [][]byte
	var exact bool
	switch letter, ok := tagToRead(f); {
	case f.Authors != nil && f.Kinds != nil && len(f.Authors)*len(f.Kinds) <= maxRanges:
		exact = f.Tags == nil
		for i := range f.Authors {
			for _, k := range f.Kinds {
				prefixes = append(prefixes, authorKindIndexPrefix(&f.Authors[i], k))
			}
		}
	case f.Authors != nil:
		exact = f.Kinds == nil && f.Tags == nil
		for i := range f.Authors {
			prefixes = append(prefixes, authorIndexPrefix(&f.Authors[i]))
		}
	case ok:
		exact = f.Kinds == nil && len(f.Tags) == 1
		for _, v := range f.Tags[letter] {
			prefixes = append(prefixes, tagIndexPrefix(letter, v))
		}
	case f.Kinds != nil:
		exact = f.Tags == nil
		for _, k := range f.Kinds {
			prefixes = append(prefixes, kindIndexPrefix(k))
		}
	default:
		exact = f.Tags == nil
		prefixes = [][]byte{timeIndexPrefix()}
	}
	lo := binary.BigEndian.AppendUint64(nil, ^uint64(f.Until))
	hi := binary.BigEndian.AppendUint64(nil, ^uint64(f.Since))
	var streams []keyStream
	for _, p := range prefixes {
		it, err := q.s.r.NewIter(&pebble.IterOptions{
			LowerBound: append(slices.Clip(p), lo...),
			UpperBound: prefixEnd(append(slices.Clip(p), hi...)),
		})
		if err != nil {
			newMerge(streams).close()
			return nil, false, fmt.Errorf("rawstore: query: %w", err)
		}
		it.First()
		streams = append(streams, &rangeStream{it: it, plen: len(p)})
	}
	return newMerge(streams), exact, nil
}

// maxRanges bounds the (author, kind) ranges one filter reads at once,
// each an open iterator; past it the author index is read instead.
const maxRanges = 1024

// tagToRead picks the tag letter with the fewest values whose values are
// all indexed.
func tagToRead(f *filter.Filter) (byte, bool) {
	var best byte
	n := -1
	for letter, vals := range f.Tags {
		if slices.ContainsFunc(vals, func(v string) bool { return len(v) > MaxIndexedTagValue }) {
			continue
		}
		if n < 0 || len(vals) < n || len(vals) == n && letter < best {
			best, n = letter, len(vals)
		}
	}
	return best, n >= 0
}

// idStream looks the ids up and orders the valid ones as an index would.
func (q *query) idStream(f *filter.Filter) (keyStream, error) {
	st := &listStream{}
	seen := map[[32]byte]bool{}
	for _, id := range f.IDs {
		if seen[id] {
			continue
		}
		seen[id] = true
		e, _, err := q.load(id[:])
		if err != nil {
			return nil, err
		}
		if e != nil && e.CreatedAt >= f.Since && e.CreatedAt <= f.Until {
			st.keys = append(st.keys, appendIndexSuffix(nil, e.CreatedAt, &id))
		}
	}
	slices.SortFunc(st.keys, bytes.Compare)
	return st, nil
}

// load returns the event id if it is valid, nil if not (or damaged).
func (q *query) load(id []byte) (*event.Event, []byte, error) {
	var key [32]byte
	copy(key[:], id)
	vk := verdictKey(&key)
	v, err := q.s.get(vk)
	if err == nil && v != nil {
		var valid bool
		valid, _, _, err = decodeVerdict(vk, v)
		if err == nil && !valid {
			return nil, nil, nil
		}
	}
	if err != nil {
		if q.bad(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("rawstore: query: read verdict %x: %w", id[:8], err)
	}
	if v == nil {
		return nil, nil, nil // pending
	}
	ek := eventKey(&key)
	ev, err := q.s.get(ek)
	var raw []byte
	if err == nil {
		if ev == nil {
			err = corrupt(ek, errors.New("valid verdict without its event"))
		} else {
			_, raw, err = q.s.decodeEvent(ek, ev)
		}
	}
	if err != nil {
		if q.bad(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("rawstore: query: read event %x: %w", id[:8], err)
	}
	if e := q.parse(ek, raw); e != nil {
		return e, raw, nil
	}
	return nil, nil, nil
}

// keyStream yields index suffixes (^created_at|id) in ascending order.
type keyStream interface {
	head() []byte // nil at the end; valid until next
	next() error
	close()
}

type rangeStream struct {
	it   *pebble.Iterator
	plen int
}

func (r *rangeStream) head() []byte {
	for r.it.Valid() {
		if k := r.it.Key(); len(k) == r.plen+indexSuffixLen {
			return k[r.plen:]
		}
		r.it.Next() // not an index key of this prefix (never written so)
	}
	return nil
}

func (r *rangeStream) next() error {
	r.it.Next()
	if err := r.it.Error(); err != nil {
		return fmt.Errorf("rawstore: query: read index: %w", err)
	}
	return nil
}

func (r *rangeStream) close() { _ = r.it.Close() }

type listStream struct{ keys [][]byte }

func (l *listStream) head() []byte {
	if len(l.keys) == 0 {
		return nil
	}
	return l.keys[0]
}
func (l *listStream) next() error { l.keys = l.keys[1:]; return nil }
func (l *listStream) close()      {}

// matchStream passes on the events of its input that are valid and match
// f, up to f's limit, holding the current one. It reads its input a page
// at a time (see page).
type matchStream struct {
	q    *query
	in   keyStream
	f    *filter.Filter
	left int // negative: no limit
	// keysOnly: every key of in matches f, so no event is read (QueryIDs),
	// only the verdicts (see QueryIDs).
	keysOnly bool
	// maxKeys and maxBytes are this stream's share of the read-ahead;
	// pages counts the pages read.
	maxKeys, maxBytes, pages int
	pg                       *page
	cur                      []byte
	ev                       *event.Event
	raw                      []byte
}

func (m *matchStream) head() []byte { return m.cur }

func (m *matchStream) next() error {
	m.cur, m.ev, m.raw = nil, nil, nil
	for m.left != 0 {
		if m.pg == nil || m.pg.pos == len(m.pg.ents) {
			if err := m.fill(); err != nil {
				return err
			}
			if len(m.pg.ents) == 0 {
				return nil
			}
		}
		en := &m.pg.ents[m.pg.pos]
		m.pg.pos++
		ok, err := m.take(en)
		if err != nil {
			return err
		}
		if ok {
			if m.left > 0 {
				m.left--
			}
			return nil
		}
	}
	return nil
}

// fill reads the next page of candidates. Under a limit the first page is
// as long as the limit (all of it when every candidate matches), and each
// further one twice the last, up to the stream's share.
func (m *matchStream) fill() error {
	n := m.maxKeys
	if m.left > 0 {
		want := m.left
		for i := 0; i < m.pages && want < n; i++ {
			want *= 2
		}
		n = min(n, want)
	}
	m.pages++
	if m.pg == nil {
		m.pg = getPage()
	}
	m.pg.ents, m.pg.pos = m.pg.ents[:0], 0
	for k := m.in.head(); k != nil && len(m.pg.ents) < n; k = m.in.head() {
		m.pg.ents = append(m.pg.ents, pageEntry{key: [indexSuffixLen]byte(k)})
		if err := m.in.next(); err != nil {
			return err
		}
	}
	if len(m.pg.ents) == 0 {
		return nil
	}
	return m.q.loadPage(m.pg, m.keysOnly, m.maxBytes)
}

// take makes the loaded candidate en current if it is valid and matches.
func (m *matchStream) take(en *pageEntry) (bool, error) {
	k := en.key[:]
	var e *event.Event
	var raw []byte
	switch {
	case en.state == entrySkip:
		return false, nil
	case m.keysOnly:
		m.cur = append(m.cur[:0], k...)
		return true, nil
	case en.state == entryLater:
		var err error
		if e, raw, err = m.q.load(k[8:]); err != nil || e == nil {
			return false, err
		}
	default:
		raw = m.pg.arena[en.off:en.end]
		ek := [1 + idLen]byte{prefixEvent}
		copy(ek[1:], k[8:])
		if e = m.q.parse(ek[:], raw); e == nil {
			return false, nil
		}
	}
	if !m.f.Match(e) {
		return false, nil
	}
	if _, skip := m.q.skip[e.ID]; skip {
		return false, nil
	}
	if m.q.latest {
		if newer, err := m.q.superseded(e, k); err != nil || newer {
			return false, err
		}
	}
	m.cur, m.ev, m.raw = append(m.cur[:0], k...), e, raw
	return true, nil
}

func (m *matchStream) close() {
	m.in.close()
	putPage(m.pg)
	m.pg = nil
}

// mergeStream merges streams in order, passing each suffix once.
type mergeStream struct{ h streamHeap }

func newMerge(streams []keyStream) *mergeStream {
	m := &mergeStream{}
	for _, s := range streams {
		if s.head() == nil {
			s.close()
			continue
		}
		m.h = append(m.h, s)
	}
	heap.Init(&m.h)
	return m
}

func (m *mergeStream) top() keyStream { return m.h[0] }

func (m *mergeStream) head() []byte {
	if len(m.h) == 0 {
		return nil
	}
	return m.h[0].head()
}

func (m *mergeStream) next() error {
	cur := append([]byte(nil), m.head()...)
	for len(m.h) > 0 && bytes.Equal(m.h[0].head(), cur) {
		s := m.h[0]
		if err := s.next(); err != nil {
			return err
		}
		if s.head() == nil {
			heap.Pop(&m.h)
			s.close()
		} else {
			heap.Fix(&m.h, 0)
		}
	}
	return nil
}

func (m *mergeStream) close() {
	for _, s := range m.h {
		s.close()
	}
	m.h = nil
}

type streamHeap []keyStream

func (h streamHeap) Len() int           { return len(h) }
func (h streamHeap) Less(i, j int) bool { return bytes.Compare(h[i].head(), h[j].head()) < 0 }
func (h streamHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *streamHeap) Push(x any)        { *h = append(*h, x.(keyStream)) }
func (h *streamHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// superseded reports whether a newer version of the replaceable or
// addressable event e (index suffix k) is archived and valid. It reads the
// index entries ordered before k (newer, or as old with a lower id): of
// the author's kind for a replaceable event; for an addressable one, of
// its d value (few events share one), else of the author's kind.
func (q *query) superseded(e *event.Event, k []byte) (bool, error) {
	addressable := 30000 <= e.Kind && e.Kind < 40000
	if !(e.Kind == 0 || e.Kind == 3 || 10000 <= e.Kind && e.Kind < 20000 || addressable) {
		return false, nil
	}
	var d string
	if addressable {
		d = dTag(e.Tags)
	}
	p := authorKindIndexPrefix(&e.PubKey, e.Kind)
	if addressable && d != "" {
		if tp := tagIndexPrefix('d', d); tp != nil {
			p = tp
		}
	}
	it, err := q.s.r.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: append(slices.Clip(p), k...)})
	if err != nil {
		return false, fmt.Errorf("rawstore: query: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		nk := it.Key()
		if len(nk) != len(p)+indexSuffixLen {
			continue
		}
		if !addressable {
			return true, nil // the index holds valid events only
		}
		o, _, err := q.load(nk[len(p)+8:])
		if err != nil {
			return false, err
		}
		if o != nil && o.PubKey == e.PubKey && o.Kind == e.Kind && dTag(o.Tags) == d {
			return true, nil
		}
	}
	if err := it.Error(); err != nil {
		return false, fmt.Errorf("rawstore: query: read index: %w", err)
	}
	return false, nil
}

// dTag is an addressable event's identifier: its first d tag's value.
func dTag(tags [][]string) string {
	for _, t := range tags {
		if len(t) >= 2 && t[0] == "d" {
			return t[1]
		}
	}
	return ""
}
