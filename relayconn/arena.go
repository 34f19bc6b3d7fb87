package relayconn

import (
	"bytes"
	"sync"
)

// rawArena holds the bytes of one page's events in a few large chunks,
// which Page.Release hands to later pages. A copy of its own for each
// event cost a crawl more than scanning the frame (a fresh allocation per
// event: 0.7 CPU-s per 1M events of 1.2 KB in crawlbench's profile, most
// of it touching memory the collector had just returned).
type rawArena struct {
	chunks []*[]byte
	cur    []byte // the last chunk's used part
}

const (
	arenaChunk = 256 << 10
	// arenaLarge and larger events get an allocation of their own, so
	// that a chunk is not left mostly empty.
	arenaLarge = arenaChunk / 8
)

var arenaChunks = sync.Pool{New: func() any {
	b := make([]byte, 0, arenaChunk)
	return &b
}}

// copy returns a copy of b that lives until release.
func (a *rawArena) copy(b []byte) []byte {
	if len(b) >= arenaLarge {
		return bytes.Clone(b)
	}
	if cap(a.cur)-len(a.cur) < len(b) {
		c := arenaChunks.Get().(*[]byte)
		a.chunks = append(a.chunks, c)
		a.cur = (*c)[:0]
	}
	n := len(a.cur)
	a.cur = append(a.cur, b...)
	return a.cur[n:len(a.cur):len(a.cur)]
}

// release hands the chunks on: what copy returned must no longer be read.
func (a *rawArena) release() {
	for _, c := range a.chunks {
		arenaChunks.Put(c)
	}
	*a = rawArena{}
}

// Release lets later pages reuse the bytes of this page's events. Call it
// only when nothing reads the Items' Raw any more (the store copies what
// it keeps: rawstore.Ingest); a page never released is collected as
// usual. It leaves the page's other fields alone, so that they may still
// be read.
func (p *Page) Release() {
	p.arena.release()
}
