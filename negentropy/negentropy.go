// Package negentropy implements the Negentropy range-based set
// reconciliation protocol, version 1 (byte 0x61), as used by NIP-77 and
// specified by hoytech/negentropy: both the initiator (a client that
// learns which ids it has and needs) and the responder (a relay). It is
// pure logic over byte messages; the hex encoding and the NEG-* frames
// belong to the caller.
package negentropy

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// Version is the protocol version byte this package speaks.
const Version byte = 0x61

// MaxTimestamp is the infinite bound's timestamp.
const MaxTimestamp = math.MaxUint64

const (
	idSize          = 32
	fingerprintSize = 16
	buckets         = 16
	// MinFrameSizeLimit is the smallest non-zero frame limit: the
	// reference implementation reserves 200 bytes of every frame for the
	// closing fingerprint.
	MinFrameSizeLimit = 4096
)

// Modes of a range.
const (
	modeSkip        = 0
	modeFingerprint = 1
	modeIDList      = 2
)

// ErrMalformed wraps every decoding failure of a peer's message.
var ErrMalformed = errors.New("negentropy: malformed message")

// ErrVersion: the peer speaks another protocol version. A responder
// answers such a message with only its own version byte (the reference
// behaviour); an initiator fails with this.
var ErrVersion = errors.New("negentropy: unsupported protocol version")

// Item is one element of a set: an event's created_at and id.
type Item struct {
	Timestamp uint64
	ID        [32]byte
}

// Compare orders items by timestamp, then id bytes.
func Compare(a, b Item) int {
	if c := cmp.Compare(a.Timestamp, b.Timestamp); c != 0 {
		return c
	}
	return bytes.Compare(a.ID[:], b.ID[:])
}

// SortItems sorts items in protocol order and drops duplicates; the
// result aliases items.
func SortItems(items []Item) []Item {
	slices.SortFunc(items, Compare)
	return slices.Compact(items)
}

// bound is a range's exclusive upper end: a timestamp and an id prefix
// (the rest of the id taken as zeros).
type bound struct {
	ts     uint64
	prefix []byte
}

func (b bound) item() Item {
	it := Item{Timestamp: b.ts}
	copy(it.ID[:], b.prefix)
	return it
}

// Neg is one side of one reconciliation. It is not safe for concurrent
// use, and a Neg is used for one reconciliation only.
type Neg struct {
	items      []Item
	frameLimit int
	initiator  bool
	started    bool
	lastIn     uint64
	lastOut    uint64
}

// New returns a reconciliation over items, which must be sorted and
// without duplicates (see SortItems) and are not copied. frameSizeLimit
// bounds every message this side produces (0: no limit); a non-zero
// limit below MinFrameSizeLimit is an error.
func New(items []Item, frameSizeLimit int) (*Neg, error) {
	if frameSizeLimit != 0 && frameSizeLimit < MinFrameSizeLimit {
		return nil, fmt.Errorf("negentropy: frame size limit %d below %d", frameSizeLimit, MinFrameSizeLimit)
	}
	if !slices.IsSortedFunc(items, Compare) {
		return nil, errors.New("negentropy: items not sorted")
	}
	return &Neg{items: items, frameLimit: frameSizeLimit}, nil
}

// Initiate returns the initiator's first message.
func (n *Neg) Initiate() ([]byte, error) {
	if n.started {
		return nil, errors.New("negentropy: already started")
	}
	n.started, n.initiator = true, true
	n.lastOut = 0
	out := []byte{Version}
	return n.splitRange(out, 0, len(n.items), bound{ts: MaxTimestamp}), nil
}

// Reconcile processes the responder's message on the initiator side. It
// returns the next message to send, or nil when reconciliation is done,
// and appends to have (ids only this side holds) and need (ids only the
// responder holds).
func (n *Neg) Reconcile(msg []byte, have, need *[][32]byte) ([]byte, error) {
	if !n.initiator {
		return nil, errors.New("negentropy: Reconcile on a responder")
	}
	out, err := n.reconcile(msg, have, need)
	if err != nil {
		return nil, err
	}
	if len(out) == 1 {
		return nil, nil
	}
	return out, nil
}

// Respond processes the initiator's message on the responder side and
// returns the answer.
func (n *Neg) Respond(msg []byte) ([]byte, error) {
	if n.initiator {
		return nil, errors.New("negentropy: Respond on an initiator")
	}
	n.started = true
	return n.reconcile(msg, nil, nil)
}

// reader consumes a peer's message; every read checks the remaining
// length, since the bytes are untrusted.
type reader struct{ b []byte }

func (r *reader) byte() (byte, error) {
	if len(r.b) < 1 {
		return 0, fmt.Errorf("%w: truncated", ErrMalformed)
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c, nil
}

func (r *reader) bytes(k uint64) ([]byte, error) {
	if uint64(len(r.b)) < k {
		return nil, fmt.Errorf("%w: %d bytes wanted, %d left", ErrMalformed, k, len(r.b))
	}
	out := r.b[:k]
	r.b = r.b[k:]
	return out, nil
}

// varint reads a base-128 big-endian varint (high bit: more follows).
func (r *reader) varint() (uint64, error) {
	var v uint64
	for i := 0; ; i++ {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if i == 9 && (v>>57 != 0 || c&0x80 != 0) {
			return 0, fmt.Errorf("%w: varint overflows 64 bits", ErrMalformed)
		}
		v = v<<7 | uint64(c&0x7f)
		if c&0x80 == 0 {
			return v, nil
		}
	}
}

// AppendVarint appends v as a negentropy varint.
func AppendVarint(out []byte, v uint64) []byte {
	var tmp [10]byte
	i := len(tmp) - 1
	tmp[i] = byte(v & 0x7f)
	for v >>= 7; v > 0; v >>= 7 {
		i--
		tmp[i] = byte(v&0x7f) | 0x80
	}
	return append(out, tmp[i:]...)
}

func (n *Neg) readBound(r *reader) (bound, error) {
	enc, err := r.varint()
	if err != nil {
		return bound{}, err
	}
	var ts uint64
	switch {
	case enc == 0 || n.lastIn == MaxTimestamp:
		ts = MaxTimestamp
	default:
		delta := enc - 1
		if delta > MaxTimestamp-1-n.lastIn {
			return bound{}, fmt.Errorf("%w: timestamp overflows", ErrMalformed)
		}
		ts = n.lastIn + delta
	}
	n.lastIn = ts
	l, err := r.varint()
	if err != nil {
		return bound{}, err
	}
	if l > idSize {
		return bound{}, fmt.Errorf("%w: bound id prefix of %d bytes", ErrMalformed, l)
	}
	p, err := r.bytes(l)
	if err != nil {
		return bound{}, err
	}
	return bound{ts: ts, prefix: p}, nil
}

func (n *Neg) appendBound(out []byte, b bound) []byte {
	if b.ts == MaxTimestamp {
		n.lastOut = MaxTimestamp
		out = AppendVarint(out, 0)
	} else {
		out = AppendVarint(out, b.ts-n.lastOut+1)
		n.lastOut = b.ts
	}
	out = AppendVarint(out, uint64(len(b.prefix)))
	return append(out, b.prefix...)
}

// lowerBound is the first index in [from, len) whose item is >= b.
func (n *Neg) lowerBound(from int, b bound) int {
	it := b.item()
	i, _ := slices.BinarySearchFunc(n.items[from:], it, Compare)
	return from + i
}

// Fingerprint is the protocol's fingerprint of items: the first 16 bytes
// of sha256(sum of ids as 256-bit little-endian integers mod 2^256 ||
// varint(count)).
func Fingerprint(items []Item) [16]byte {
	var acc [4]uint64
	for i := range items {
		id := &items[i].ID
		var carry uint64
		for w := 0; w < 4; w++ {
			acc[w], carry = bits.Add64(acc[w], binary.LittleEndian.Uint64(id[w*8:]), carry)
		}
	}
	var buf [32 + 10]byte
	for w := 0; w < 4; w++ {
		binary.LittleEndian.PutUint64(buf[w*8:], acc[w])
	}
	tail := AppendVarint(buf[:32], uint64(len(items)))
	sum := sha256.Sum256(tail)
	var fp [16]byte
	copy(fp[:], sum[:16])
	return fp
}

func (n *Neg) exceeded(size int) bool {
	return n.frameLimit != 0 && size > n.frameLimit-200
}

func (n *Neg) reconcile(msg []byte, have, need *[][32]byte) ([]byte, error) {
	n.lastIn, n.lastOut = 0, 0
	r := &reader{b: msg}
	full := []byte{Version}
	v, err := r.byte()
	if err != nil {
		return nil, err
	}
	if v < 0x60 || v > 0x6f {
		return nil, fmt.Errorf("%w: version byte 0x%02x", ErrMalformed, v)
	}
	if v != Version {
		if n.initiator {
			return nil, fmt.Errorf("%w: 0x%02x", ErrVersion, v)
		}
		return full, nil
	}
	var prev bound
	prevIndex := 0
	skip := false
	for len(r.b) > 0 {
		var o []byte
		doSkip := func() {
			if skip {
				skip = false
				o = n.appendBound(o, prev)
				o = AppendVarint(o, modeSkip)
			}
		}
		cur, err := n.readBound(r)
		if err != nil {
			return nil, err
		}
		mode, err := r.varint()
		if err != nil {
			return nil, err
		}
		lower := prevIndex
		upper := n.lowerBound(prevIndex, cur)
		switch mode {
		case modeSkip:
			skip = true
		case modeFingerprint:
			theirs, err := r.bytes(fingerprintSize)
			if err != nil {
				return nil, err
			}
			ours := Fingerprint(n.items[lower:upper])
			if bytes.Equal(theirs, ours[:]) {
				skip = true
			} else {
				doSkip()
				o = n.splitRange(o, lower, upper, cur)
			}
		case modeIDList:
			count, err := r.varint()
			if err != nil {
				return nil, err
			}
			if count > uint64(len(r.b))/idSize {
				return nil, fmt.Errorf("%w: %d ids announced, %d bytes left", ErrMalformed, count, len(r.b))
			}
			theirs := make(map[[32]byte]struct{}, count)
			for i := uint64(0); i < count; i++ {
				b, _ := r.bytes(idSize)
				theirs[[32]byte(b)] = struct{}{}
			}
			if n.initiator {
				skip = true
				for _, it := range n.items[lower:upper] {
					if _, ok := theirs[it.ID]; ok {
						delete(theirs, it.ID)
					} else {
						*have = append(*have, it.ID)
					}
				}
				// Sorted, so the result does not depend on map order.
				start := len(*need)
				for id := range theirs {
					*need = append(*need, id)
				}
				slices.SortFunc((*need)[start:], func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
			} else {
				doSkip()
				end := cur
				var ids []byte
				k := 0
				for i := lower; i < upper; i++ {
					if n.exceeded(len(full) + len(ids)) {
						end = bound{ts: n.items[i].Timestamp, prefix: n.items[i].ID[:]}
						upper = i
						break
					}
					ids = append(ids, n.items[i].ID[:]...)
					k++
				}
				o = n.appendBound(o, end)
				o = AppendVarint(o, modeIDList)
				o = AppendVarint(o, uint64(k))
				o = append(o, ids...)
				full = append(full, o...)
				o = o[:0]
			}
		default:
			return nil, fmt.Errorf("%w: mode %d", ErrMalformed, mode)
		}
		if n.exceeded(len(full) + len(o)) {
			// Over the frame limit: stop here and hand the rest of the
			// range back as one fingerprint, to be split next round.
			fp := Fingerprint(n.items[upper:])
			full = n.appendBound(full, bound{ts: MaxTimestamp})
			full = AppendVarint(full, modeFingerprint)
			full = append(full, fp[:]...)
			break
		}
		full = append(full, o...)
		prevIndex = upper
		prev = cur
	}
	return full, nil
}

// splitRange appends either the ids of [lower, upper) (small ranges) or
// 16 fingerprinted buckets covering it.
func (n *Neg) splitRange(out []byte, lower, upper int, upperBound bound) []byte {
	count := upper - lower
	if count < 2*buckets {
		out = n.appendBound(out, upperBound)
		out = AppendVarint(out, modeIDList)
		out = AppendVarint(out, uint64(count))
		for _, it := range n.items[lower:upper] {
			out = append(out, it.ID[:]...)
		}
		return out
	}
	per, extra := count/buckets, count%buckets
	cur := lower
	for i := 0; i < buckets; i++ {
		size := per
		if i < extra {
			size++
		}
		fp := Fingerprint(n.items[cur : cur+size])
		cur += size
		next := upperBound
		if cur != upper {
			next = minimalBound(n.items[cur-1], n.items[cur])
		}
		out = n.appendBound(out, next)
		out = AppendVarint(out, modeFingerprint)
		out = append(out, fp[:]...)
	}
	return out
}

// minimalBound is the shortest bound above prev and at or below cur.
func minimalBound(prev, cur Item) bound {
	if cur.Timestamp != prev.Timestamp {
		return bound{ts: cur.Timestamp}
	}
	shared := 0
	for shared < idSize && cur.ID[shared] == prev.ID[shared] {
		shared++
	}
	return bound{ts: cur.Timestamp, prefix: cur.ID[:min(shared+1, idSize)]}
}
