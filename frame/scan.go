package frame

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"

	"github.com/nostr-archiver/archiver/event"
)

// The byte scanner. Every function takes the frame and an offset and
// returns the offset just past what it read, or -1 when it cannot read it;
// -1 never means "invalid", only "not sure": scanEvent then gives up and
// the encoding/json path decides.

// maxDepth bounds the nesting the scanner follows (the frame array is
// depth 1, the event 2, tags 3, a tag 4); deeper values are left to
// encoding/json, which allows 10000.
const maxDepth = 64

// strPlain marks the bytes a JSON string may hold verbatim: not '"', not
// '\\', not a control character. Bytes >= 0x80 are taken as they are,
// as encoding/json's syntax check does; UTF-8 validity is event.Parse's
// concern.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < len(t); c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

var eventPrefix = []byte(`"EVENT"`)

// scanEvent is the hot path. It succeeds only for an EVENT frame it can
// read completely and unambiguously; everything else, including every
// frame that is an error, returns ok == false.
func scanEvent(b []byte) (m Msg, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '[' {
		return m, false
	}
	i = skipWS(b, i+1)
	if !bytes.HasPrefix(b[i:], eventPrefix) {
		return m, false
	}
	if i = expect(b, i+len(eventPrefix), ','); i < 0 {
		return m, false
	}

	// The subscription id, only when no decoding is needed: printable
	// ASCII without escapes reads the same as bytes and as JSON.
	if i >= len(b) || b[i] != '"' {
		return m, false
	}
	subStart := i + 1
	for i = subStart; i < len(b) && b[i] < 0x80 && strPlain[b[i]]; i++ {
	}
	if i >= len(b) || b[i] != '"' {
		return m, false
	}
	subEnd := i
	if i = expect(b, i+1, ','); i < 0 {
		return m, false
	}

	start := i
	end, id, createdAt, ok := scanEventObject(b, start)
	if !ok {
		return m, false
	}
	// Exactly three elements, then only whitespace.
	if i = expect(b, end, ']'); i != len(b) {
		return m, false
	}
	return Msg{
		Label:     Event,
		SubID:     intern(b[subStart:subEnd]),
		Raw:       b[start:end:end],
		ID:        id,
		CreatedAt: createdAt,
	}, true
}

// scanEventObject walks the top-level keys of the object at b[i] and
// reads "id" and "created_at"; every other value is skipped (and its
// syntax checked). It gives up on an escaped key, since "\u0069d" is "id"
// to a JSON decoder, and on a repeated id or created_at, since which of
// the two counts is a matter of opinion between decoders.
func scanEventObject(b []byte, i int) (end int, id [32]byte, createdAt int64, ok bool) {
	if i >= len(b) || b[i] != '{' {
		return
	}
	var seenID, seenCreatedAt bool
	for i = skipWS(b, i+1); ; {
		if i >= len(b) || b[i] != '"' {
			return // includes the empty object, which has no id
		}
		keyStart := i + 1
		for i = keyStart; i < len(b) && strPlain[b[i]]; i++ {
		}
		if i >= len(b) || b[i] != '"' {
			return
		}
		key := b[keyStart:i]
		if i = expect(b, i+1, ':'); i < 0 {
			return
		}
		switch string(key) {
		case "id":
			// 64 lowercase hex digits; an escape or anything else is left
			// to the decoder.
			if seenID || i+66 > len(b) || b[i] != '"' || b[i+65] != '"' ||
				event.DecodeHex32(&id, b[i+1:i+65]) != nil {
				return
			}
			seenID = true
			i += 66
		case "created_at":
			if seenCreatedAt {
				return
			}
			seenCreatedAt = true
			if createdAt, i = scanUint(b, i); i < 0 {
				return
			}
		default:
			if i = skipValue(b, i, 2); i < 0 {
				return
			}
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return i + 1, id, createdAt, seenID && seenCreatedAt
		default:
			return
		}
	}
}

// expect skips whitespace, requires c, and skips the whitespace after it.
func expect(b []byte, i int, c byte) int {
	i = skipWS(b, i)
	if i >= len(b) || b[i] != c {
		return -1
	}
	return skipWS(b, i+1)
}

func skipWS(b []byte, i int) int {
	for ; i < len(b); i++ {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return i
		}
	}
	return i
}

// skipValue skips the JSON value at b[i], which sits at nesting depth.
func skipValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return -1
		}
		return skipContainer(b, i, depth+1)
	case c == '-' || isDigit(c):
		return skipNumber(b, i)
	case c == 't':
		return skipLiteral(b, i, "true")
	case c == 'f':
		return skipLiteral(b, i, "false")
	case c == 'n':
		return skipLiteral(b, i, "null")
	}
	return -1
}

// skipContainer skips the array or object opening at b[i].
func skipContainer(b []byte, i, depth int) int {
	closing := byte(']')
	isObject := b[i] == '{'
	if isObject {
		closing = '}'
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == closing {
		return i + 1
	}
	for {
		if isObject {
			if i >= len(b) || b[i] != '"' {
				return -1
			}
			if i = skipString(b, i); i < 0 {
				return -1
			}
			if i = expect(b, i, ':'); i < 0 {
				return -1
			}
		}
		if i = skipValue(b, i, depth); i < 0 {
			return -1
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case closing:
			return i + 1
		default:
			return -1
		}
	}
}

// skipString skips the string opening at b[i] == '"', checking escapes.
func skipString(b []byte, i int) int {
	for i++; ; {
		// Contents are most of an event's bytes: look at 32 at a time
		// where the CPU can, then 16, then 8, until one may end the run
		// of plain bytes.
		if n, stop := plainRun(b, i); stop {
			i += n
			goto stop
		} else {
			i += n
		}
		for i+16 <= len(b) {
			w := b[i : i+16 : i+16]
			lo, hi := stringStops(binary.LittleEndian.Uint64(w)), stringStops(binary.LittleEndian.Uint64(w[8:]))
			if lo|hi != 0 {
				if lo != 0 {
					i += bits.TrailingZeros64(lo) / 8
				} else {
					i += 8 + bits.TrailingZeros64(hi)/8
				}
				goto stop
			}
			i += 16
		}
		for i+8 <= len(b) {
			if m := stringStops(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
		}
	stop:
		for i < len(b) && strPlain[b[i]] {
			i++
		}
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return -1
				}
				i += 6
			default:
				return -1
			}
		default: // a control character
			return -1
		}
	}
}

// stringStops sets the high bit of each byte of x that is '"', '\\' or a
// control character, the bytes that are not strPlain. Bits above the first
// set one may be false positives (borrows), so only the lowest is exact.
func stringStops(x uint64) uint64 {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	q := x ^ (ones * '"')
	s := x ^ (ones * '\\')
	return ((x-ones*0x20)&^x | (q-ones)&^q | (s-ones)&^s) & highs
}

// skipNumber skips -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at b[i].
func skipNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case isDigit(b[i]):
		i = skipDigits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

func skipLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// scanUint reads a non-negative JSON integer that fits an int64: 0 or
// [1-9][0-9]*. A fraction or exponent after it is the caller's to reject.
func scanUint(b []byte, i int) (int64, int) {
	start := i
	var v int64
	for ; i < len(b) && isDigit(b[i]); i++ {
		d := int64(b[i] - '0')
		if v > (math.MaxInt64-d)/10 {
			return 0, -1
		}
		v = v*10 + d
	}
	if i == start || (b[start] == '0' && i-start > 1) {
		return 0, -1
	}
	return v, i
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool {
	return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}
