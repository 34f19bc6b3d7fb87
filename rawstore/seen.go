package rawstore

import (
	"encoding/binary"
	"io"
	"math"
)

// First-seen times, in unix seconds (0: unknown). An E or A value is
// version|relay(4)|raw in version 1 (archives from before the times),
// version|relay(4)|seen(4)|raw in version 2: when that copy was first
// received, and version|relay(4)|seen(4)|segment(4)|offset(4)|length(4)
// in version 3, whose bytes are in the segment log (see segment.go).
// Every reader goes through Store.decodeEvent, which resolves all three. An R value is when that later relay first served the id,
// written as a merge operand so that a repeated sighting, a blind write
// like the empty R value it replaces, never moves it later (see
// firstSeenMerger).
const (
	eventV1          = 1
	eventV2          = 2
	eventV3          = 3
	eventHeaderLenV2 = eventHeaderLen + 4
	eventLenV3       = eventHeaderLenV2 + 12
)

// eventValue is the E or A value of a copy first received from relay at
// seen (version 1 when seen is unknown).
func eventValue(relay, seen uint32, raw []byte) []byte {
	v := eventHeader(seen, len(raw))
	binary.BigEndian.PutUint32(v[1:], relay)
	return append(v, raw...)
}

// eventHeader is the header of an E or A value first seen at seen, with
// room for rawLen bytes; the caller sets its relay (v[1:5]).
func eventHeader(seen uint32, rawLen int) []byte {
	if seen == 0 {
		v := make([]byte, eventHeaderLen, eventHeaderLen+rawLen)
		v[0] = eventV1
		return v
	}
	v := make([]byte, eventHeaderLenV2, eventHeaderLenV2+rawLen)
	v[0] = eventV2
	binary.BigEndian.PutUint32(v[eventHeaderLen:], seen)
	return v
}

// segValue is the E value of a copy first received from relay at seen
// (0: unknown) whose bytes are at loc in the segment log.
func segValue(relay, seen uint32, loc segLoc) []byte {
	v := make([]byte, eventLenV3)
	putSegValue(v, relay, seen, loc)
	return v
}

// putSegValue writes segValue's bytes into v.
func putSegValue(v []byte, relay, seen uint32, loc segLoc) {
	v[0] = eventV3
	binary.BigEndian.PutUint32(v[1:], relay)
	binary.BigEndian.PutUint32(v[5:], seen)
	binary.BigEndian.PutUint32(v[9:], loc.seg)
	binary.BigEndian.PutUint32(v[13:], loc.off)
	binary.BigEndian.PutUint32(v[17:], loc.n)
}

// segLocOf is where the bytes of the version 3 value v are.
func segLocOf(v []byte) segLoc {
	return segLoc{segPos: segPos{seg: binary.BigEndian.Uint32(v[9:]), off: binary.BigEndian.Uint32(v[13:])}, n: binary.BigEndian.Uint32(v[17:])}
}

// eventHeaderSize is the header length of an E or A value, 0 if v is not
// one. A version 3 value is all header.
func eventHeaderSize(v []byte) int {
	switch {
	case len(v) >= eventHeaderLen && v[0] == eventV1:
		return eventHeaderLen
	case len(v) >= eventHeaderLenV2 && v[0] == eventV2:
		return eventHeaderLenV2
	case len(v) == eventLenV3 && v[0] == eventV3:
		return eventLenV3
	}
	return 0
}

// inlineRaw is the copy's bytes in an E or A value that holds them
// (versions 1 and 2, and what lookup resolves version 3 to); nil if v is
// not one.
func inlineRaw(v []byte) []byte {
	if n := eventHeaderSize(v); n > 0 && v[0] != eventV3 {
		return v[n:]
	}
	return nil
}

// eventSeen is when the copy of an E or A value was first received.
func eventSeen(v []byte) int64 {
	if n := eventHeaderSize(v); n >= eventHeaderLenV2 {
		return int64(binary.BigEndian.Uint32(v[eventHeaderLen:]))
	}
	return 0
}

// seenValue is an R merge operand.
func seenValue(seen uint32) []byte { return binary.BigEndian.AppendUint32(nil, seen) }

// now is the store clock's unix second, clamped to what a header holds.
func (s *Store) now() uint32 {
	t := s.opts.Now().Unix()
	return uint32(min(max(t, 1), math.MaxUint32))
}

// firstSeenMerger resolves an R key's operands to the earliest time. An
// empty value is a sighting from before the times were kept: earlier than
// any, so it wins and the time stays unknown.
type firstSeenMerger struct {
	unknown bool
	first   uint32
}

func (m *firstSeenMerger) MergeNewer(v []byte) error {
	switch {
	case len(v) != 4:
		m.unknown = true
	case m.first == 0 || binary.BigEndian.Uint32(v) < m.first:
		m.first = binary.BigEndian.Uint32(v)
	}
	return nil
}

func (m *firstSeenMerger) MergeOlder(v []byte) error { return m.MergeNewer(v) }

func (m *firstSeenMerger) Finish(bool) ([]byte, io.Closer, error) {
	if m.unknown || m.first == 0 {
		return []byte{}, nil, nil
	}
	return seenValue(m.first), nil, nil
}

// provSeen reads an R value.
func provSeen(v []byte) int64 {
	if len(v) != 4 {
		return 0
	}
	return int64(binary.BigEndian.Uint32(v))
}
