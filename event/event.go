// Package event is the NIP-01 event model: strict parsing of the JSON
// object a relay sends, the canonical serialization whose sha256 is the
// event id, and the compact JSON form the archive exports.
//
// Parsing here is the exact path used off the receive loop (by the
// lazy verify pool and by the frame scanner when it is unsure). The receive
// path itself never parses JSON: see package frame.
package event

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// Event is a decoded Nostr event.
type Event struct {
	ID        [32]byte
	PubKey    [32]byte
	CreatedAt int64
	Kind      int
	Tags      [][]string
	Content   string
	Sig       [64]byte
}

// ErrMalformed is wrapped by every parse error: the bytes are not a
// well-formed NIP-01 event object.
var ErrMalformed = errors.New("malformed event")

// AppendCanonical appends the NIP-01 serialization
// [0,<pubkey>,<created_at>,<kind>,<tags>,<content>] whose sha256 is the id.
func AppendCanonical(dst []byte, e *Event) []byte {
	dst = append(dst, `[0,"`...)
	dst = hex.AppendEncode(dst, e.PubKey[:])
	dst = append(dst, `",`...)
	dst = strconv.AppendInt(dst, e.CreatedAt, 10)
	dst = append(dst, ',')
	dst = strconv.AppendInt(dst, int64(e.Kind), 10)
	dst = append(dst, ',')
	dst = appendTags(dst, e.Tags)
	dst = append(dst, ',')
	dst = AppendString(dst, e.Content)
	dst = append(dst, ']')
	return dst
}

// ComputeID returns sha256 of the canonical serialization. buf is scratch
// space that may be reused across calls; the grown buffer is returned.
func (e *Event) ComputeID(buf []byte) ([32]byte, []byte) {
	buf = AppendCanonical(buf[:0], e)
	return sha256.Sum256(buf), buf
}

// AppendJSON appends the event as one compact JSON object with the keys in
// NIP-01 order, the form `archiver export` writes (one per line).
func AppendJSON(dst []byte, e *Event) []byte {
	dst = append(dst, `{"id":"`...)
	dst = hex.AppendEncode(dst, e.ID[:])
	dst = append(dst, `","pubkey":"`...)
	dst = hex.AppendEncode(dst, e.PubKey[:])
	dst = append(dst, `","created_at":`...)
	dst = strconv.AppendInt(dst, e.CreatedAt, 10)
	dst = append(dst, `,"kind":`...)
	dst = strconv.AppendInt(dst, int64(e.Kind), 10)
	dst = append(dst, `,"tags":`...)
	dst = appendTags(dst, e.Tags)
	dst = append(dst, `,"content":`...)
	dst = AppendString(dst, e.Content)
	dst = append(dst, `,"sig":"`...)
	dst = hex.AppendEncode(dst, e.Sig[:])
	dst = append(dst, `"}`...)
	return dst
}

func appendTags(dst []byte, tags [][]string) []byte {
	dst = append(dst, '[')
	for i, tag := range tags {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '[')
		for j, s := range tag {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = AppendString(dst, s)
		}
		dst = append(dst, ']')
	}
	return append(dst, ']')
}

// AppendString appends s as a JSON string with exactly the NIP-01 escapes:
// \" \\ \n \r \t \b \f, other control characters as \u00XX, everything
// else (including '/', '<', non-ASCII) verbatim.
func AppendString(dst []byte, s string) []byte {
	const hexdig = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexdig[c>>4], hexdig[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// DecodeHex32 decodes 64 lowercase hex characters. NIP-01 requires
// lowercase; uppercase is rejected so that one id has one spelling.
func DecodeHex32(dst *[32]byte, s []byte) error {
	return decodeLowerHex(dst[:], s)
}

// DecodeHex64 decodes 128 lowercase hex characters.
func DecodeHex64(dst *[64]byte, s []byte) error {
	return decodeLowerHex(dst[:], s)
}

func decodeLowerHex(dst, s []byte) error {
	if len(s) != 2*len(dst) {
		return fmt.Errorf("hex length %d, want %d", len(s), 2*len(dst))
	}
	// A table and no branch per digit: ids are random hex, and a branch
	// on digit or letter mispredicted about every other byte (0.35 µs of
	// the frame scan's 1.2 per event).
	var bad byte
	for i := range dst {
		hi, lo := hexNibble[s[2*i]], hexNibble[s[2*i+1]]
		bad |= hi | lo
		dst[i] = hi<<4 | lo
	}
	if bad <= 0xf {
		return nil
	}
	for i, c := range s {
		if hexNibble[c] > 0xf {
			return fmt.Errorf("not lowercase hex at offset %d", i&^1)
		}
	}
	return nil // not reached
}

// hexNibble is the value of each byte as a lowercase hex digit, 0xff for
// any other byte.
var hexNibble = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c - 'a' + 10)
	}
	return t
}()
