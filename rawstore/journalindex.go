package rawstore

import (
	"encoding/binary"
	"hash/maphash"
)

// journalIndex finds the journal's E entries by id until a fold. A Go map
// of 32-byte ids to E values spread a fold's 128Ki entries over ~8 MB of
// slots, so nearly every insert of a random id missed the cache twice
// (~200 ns; 0.5 CPU-s of a 1M crawl), and grew by moving them all. Here
// the entries are appended, in commit order, to fixed chunks that never
// move, and a table of 8-byte slots (2 MB for a fold) holds each entry's
// place and a tag of its hash: one likely miss per insert, and the fold
// reads the entries in order.
//
// Not safe for concurrent use: the store's pend.mu guards it, and a fold
// replaces it rather than clearing it, so that a reader holding it keeps
// what its snapshot cannot see.
type journalIndex struct {
	chunks [][]foldEntry // each journalChunk long but the last
	n      int
	// slots is open addressing with linear probing, half full at the size
	// asked for and at most three quarters: 0 is empty, else the hash's
	// top 32 bits << 32 | entry index + 1.
	slots []uint64
}

// journalChunk is the entries of one chunk (256 KiB).
const journalChunk = 1 << 12

// journalSeed keys the hash: ids are a relay's to choose (forged ones are
// stored too), so their own bits must not pick the slots.
var journalSeed = maphash.MakeSeed()

// newJournalIndex returns an empty index with slots for about n entries.
func newJournalIndex(n int) *journalIndex {
	size := 16
	for size < 2*n {
		size *= 2
	}
	return &journalIndex{slots: make([]uint64, size)}
}

// len is the number of ids held (nil holds none).
func (x *journalIndex) len() int {
	if x == nil {
		return 0
	}
	return x.n
}

// entry is the i-th entry put.
func (x *journalIndex) entry(i int) *foldEntry {
	return &x.chunks[i/journalChunk][i%journalChunk]
}

// find returns id's hash and slot, and whether the slot holds id (else it
// is the empty one where id goes).
func (x *journalIndex) find(id *[32]byte) (h uint64, slot int, found bool) {
	h = maphash.Comparable(journalSeed, *id)
	tag := h >> 32
	mask := uint64(len(x.slots) - 1)
	for p := h & mask; ; p = (p + 1) & mask {
		s := x.slots[p]
		if s == 0 {
			return h, int(p), false
		}
		if s>>32 == tag && x.entry(int(uint32(s))-1).id == *id {
			return h, int(p), true
		}
	}
}

// get returns id's E value (nil holds none).
func (x *journalIndex) get(id *[32]byte) ([eventLenV3]byte, bool) {
	if x == nil {
		return [eventLenV3]byte{}, false
	}
	_, p, ok := x.find(id)
	if !ok {
		return [eventLenV3]byte{}, false
	}
	return x.entry(int(uint32(x.slots[p])) - 1).v, true
}

// put sets id's E value (a later one replaces an earlier).
func (x *journalIndex) put(id *[32]byte, v *[eventLenV3]byte) {
	h, p, ok := x.find(id)
	if ok {
		x.entry(int(uint32(x.slots[p])) - 1).v = *v
		return
	}
	if x.n%journalChunk == 0 {
		x.chunks = append(x.chunks, make([]foldEntry, journalChunk))
	}
	*x.entry(x.n) = foldEntry{hi: binary.BigEndian.Uint64(id[:8]), id: *id, v: *v}
	x.n++
	x.slots[p] = h>>32<<32 | uint64(x.n)
	if 4*x.n > 3*len(x.slots) {
		x.grow()
	}
}

// each calls fn with every entry, in the order put.
func (x *journalIndex) each(fn func(e *foldEntry)) {
	for i := range x.len() {
		fn(x.entry(i))
	}
}

// grow doubles the slots and places every entry again.
func (x *journalIndex) grow() {
	x.slots = make([]uint64, 2*len(x.slots))
	mask := uint64(len(x.slots) - 1)
	for i := range x.n {
		h := maphash.Comparable(journalSeed, x.entry(i).id)
		p := h & mask
		for x.slots[p] != 0 {
			p = (p + 1) & mask
		}
		x.slots[p] = h>>32<<32 | uint64(i+1)
	}
}
