package rawstore

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// idFilter is a blocked Bloom filter of the stored ids, kept in memory so
// that Ingest skips the Pebble lookup of an id the filter proves new: on a
// crawl most ids are new, and their lookups (a bloom probe in every level's
// tables, loading those tables' filter blocks as flushes and compactions
// replace them) were a third of the crawl's CPU.
//
// It only ever answers "new" for an id never added, so it never turns a
// duplicate into a second primary copy: Ingest adds each id before the
// commit that stores it, and Open's build adds every id stored before.
// Until that build is done, and once far more ids were added than it was
// sized for, every id is looked up as before. Its size is fixed at open
// (see idFilterBits): the ids of an adversarial relay can only make it
// answer "maybe" more often, and the lookup then decides.
type idFilter struct {
	words    []atomic.Uint64 // blocks of idBlockWords words
	seed     maphash.Seed    // per store: a relay cannot aim at our bits
	blocks   uint64
	capacity int64        // ids it is sized for
	added    atomic.Int64 // adds, repeats included
	ready    atomic.Bool  // the build from the archive finished
}

const (
	idBlockWords = 8  // one 64-byte cache line per id
	idProbes     = 7  // bits set per id, 9 bits of hash each
	idBitsPerID  = 10 // ~1% false "maybe" at capacity
	// Bounds of the ids a filter is sized for: twice the ids stored at
	// open plus minIDFilterIDs (2.5 MiB for a new archive), at most what
	// maxIDFilterBytes holds (~27M ids).
	minIDFilterIDs   = 2 << 20
	maxIDFilterBytes = 32 << 20
	maxIDFilterIDs   = maxIDFilterBytes * 8 / idBitsPerID
)

// newIDFilter returns a filter sized for the archive's stored ids.
func newIDFilter(stored int64) *idFilter {
	capacity := min(2*max(stored, 0)+minIDFilterIDs, maxIDFilterIDs)
	blocks := uint64(capacity*idBitsPerID/(64*idBlockWords)) + 1
	return &idFilter{words: make([]atomic.Uint64, blocks*idBlockWords), seed: maphash.MakeSeed(), blocks: blocks, capacity: capacity}
}

// probe returns the first word of id's block and the bits it sets in
// each of the block's words.
func (f *idFilter) probe(id *[32]byte) (base uint64, masks [idBlockWords]uint64) {
	h := maphash.Bytes(f.seed, id[:])
	hi, _ := bits.Mul64(h, f.blocks)
	h = h*0x9e3779b97f4a7c15 | 1
	for range idProbes {
		bit := h & 511
		masks[bit>>6] |= 1 << (bit & 63)
		h >>= 9
	}
	return hi * idBlockWords, masks
}

// add records id; safe alongside other adds and lookups.
func (f *idFilter) add(id *[32]byte) {
	f.set(f.probe(id))
}

// set ors masks into the block at base: one atomic per word touched, not
// per bit (the ors were most of an add).
func (f *idFilter) set(base uint64, masks [idBlockWords]uint64) {
	for i, m := range masks {
		if m != 0 {
			f.words[base+uint64(i)].Or(m)
		}
	}
	f.added.Add(1)
}

// usable reports whether the filter may prove anything: its build is done
// and it is not far over what it was sized for.
func (f *idFilter) usable() bool {
	return f.ready.Load() && f.added.Load() <= 2*f.capacity
}

// has reports whether every bit of masks is set at base.
func (f *idFilter) has(base uint64, masks [idBlockWords]uint64) bool {
	for i, m := range masks {
		if m != 0 && f.words[base+uint64(i)].Load()&m != m {
			return false
		}
	}
	return true
}

// proveNew reports whether id was certainly never added, and so is not
// stored. It is false while the filter cannot tell.
func (f *idFilter) proveNew(id *[32]byte) bool {
	return f.usable() && !f.has(f.probe(id))
}

// claim is proveNew that also adds an id it proves new, with one probe
// while the block is in cache: Ingest claims the ids its lookup proves
// new (and adds the others before their commit). An id claimed and then
// not stored (a concurrent ingest stored it first, the batch failed)
// only makes the filter answer "maybe" for it, which the lookup decides.
func (f *idFilter) claim(id *[32]byte) bool {
	if !f.usable() {
		return false
	}
	base, masks := f.probe(id)
	if f.has(base, masks) {
		return false
	}
	f.set(base, masks)
	return true
}

// storedEvents reads the unique-ids counter (0 if absent).
func (s *Store) storedEvents() (int64, error) {
	v, err := s.get(counterKey(CounterEvents))
	if err != nil || len(v) != 8 {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(v)), nil
}

// buildIDFilter adds every stored id to f, reading E keys only (the
// bodies, in blob files, are not read), and marks it ready. It gives up,
// leaving f unready, if stop is closed first or the archive cannot be read.
func (s *Store) buildIDFilter(f *idFilter, stop <-chan struct{}) error {
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEvent}, UpperBound: []byte{prefixEvent + 1}})
	if err != nil {
		return fmt.Errorf("rawstore: build id filter: %w", err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		if k := it.Key(); len(k) == 1+idLen {
			f.add((*[32]byte)(k[1:]))
		}
		if n++; n%4096 == 0 {
			select {
			case <-stop:
				return nil
			default:
			}
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("rawstore: build id filter: %w", err)
	}
	f.ready.Store(true)
	return nil
}
