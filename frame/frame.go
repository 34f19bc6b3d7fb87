// Package frame classifies relay->client Nostr frames on the receive path.
//
// For EVENT frames, the common case by far, Parse does not parse JSON: it
// walks the bytes of the frame, validating the JSON structure it crosses,
// and picks out the subscription id, the exact bytes of the event object
// and the object's top-level "id" and "created_at". Everything else about
// the event (pubkey, signature, tags, content) is left to event.Parse in
// the lazy verify pool.
//
// Whenever the byte scanner is not sure (an escaped key or sub id,
// duplicate top-level keys, a value it cannot read, anything malformed),
// the frame is decoded again with encoding/json and that decoder decides.
// Every other label (EOSE, CLOSED, NOTICE, ...) goes through encoding/json
// directly: they arrive once per page or less.
package frame

import (
	"errors"
)

// Label is the first element of a relay->client frame.
type Label uint8

// Labels a relay sends (NIP-01, NIP-42, NIP-45, NIP-77). Any other string
// label is Unknown, not an error: relays send labels nobody standardized
// (`LIMITS`), and the caller decides whether to report them.
const (
	Unknown Label = iota
	Event         // ["EVENT", sub, {event}]
	EOSE          // ["EOSE", sub]
	Closed        // ["CLOSED", sub, message]
	Notice        // ["NOTICE", message]
	Auth          // ["AUTH", challenge]
	OK            // ["OK", id, accepted, message]
	Count         // ["COUNT", sub, {"count": n, ...}]
	NegMsg        // ["NEG-MSG", sub, hex message]
	NegErr        // ["NEG-ERR", sub, reason, ...]
)

var labelNames = [...]string{
	Unknown: "unknown",
	Event:   "EVENT",
	EOSE:    "EOSE",
	Closed:  "CLOSED",
	Notice:  "NOTICE",
	Auth:    "AUTH",
	OK:      "OK",
	Count:   "COUNT",
	NegMsg:  "NEG-MSG",
	NegErr:  "NEG-ERR",
}

// labels maps the exact label text to its Label; anything absent is Unknown.
var labels = func() map[string]Label {
	m := make(map[string]Label, len(labelNames)-1)
	for l, name := range labelNames[Event:] {
		m[name] = Label(l) + Event
	}
	return m
}()

func (l Label) String() string {
	if int(l) < len(labelNames) {
		return labelNames[l]
	}
	return "unknown"
}

// Msg is one decoded frame. Which fields are set depends on Label:
//
//	Event   SubID, Raw, ID, CreatedAt
//	EOSE    SubID
//	Closed  SubID, Message (the reason; "" if the relay sent none)
//	Notice  Message
//	Auth    Message (the challenge)
//	OK      ID, Accepted, Message ("" if the relay sent none)
//	Count   SubID, Count, Approximate
//	NegMsg  SubID, Message (the hex-encoded negentropy message)
//	NegErr  SubID, Message (the reason; further elements are ignored)
//	Unknown Message (the label text itself; other elements are ignored)
//
// Reasons are passed through unchanged, including strfry's "ERROR: "
// prefix; mapping them to actions is the crawler's job.
type Msg struct {
	Label Label
	SubID string
	// Raw is the event object exactly as received, from '{' to the
	// matching '}'. It aliases the frame passed to Parse (its capacity is
	// clipped so appending to it cannot overwrite the frame): copy it
	// before the frame's buffer is reused, as websocket readers do once
	// the message handler returns.
	Raw       []byte
	ID        [32]byte
	CreatedAt int64
	Message   string
	Count     int64
	// Approximate marks a COUNT the relay says is not exact: NIP-45's
	// "approximate" (a probabilistic count, or one cut off at a cap, as
	// archiver serve's is) or strfry's "limited". Such a count may be
	// below what the relay holds, so it sizes plans and proves nothing.
	Approximate bool
	Accepted    bool
}

var (
	// ErrMalformed: the frame is not a relay message at all: not a JSON
	// array, no string label, or the elements a known label requires are
	// missing or of the wrong type (for EVENT: no string subscription id).
	// Msg.Label is set if the label was read; no other field is.
	ErrMalformed = errors.New("malformed relay frame")

	// ErrBadEvent: an EVENT frame whose subscription id was read but which
	// is otherwise unusable: the object is missing, not valid JSON, not an
	// object, lacks a valid top-level "id" (64 lowercase hex) or
	// "created_at" (a non-negative integer without fraction or exponent;
	// "-0" is 0),
	// has either key twice, or the frame has further elements or trailing
	// bytes after its closing ']'. Msg.SubID is set, and so is Msg.Raw: the
	// object's exact bytes if it is valid JSON, otherwise the bytes from
	// the start of the third element to the end of the frame (without a
	// final ']'), nil if there is no third element. ID and CreatedAt are
	// zero.
	ErrBadEvent = errors.New("bad EVENT frame")
)

// Parse classifies one text frame from a relay. It is safe for concurrent
// use and, for an EVENT frame whose subscription id is short printable
// ASCII without escapes, allocates nothing in the common case (see
// intern). The returned Msg.Raw aliases frame.
func Parse(frame []byte) (Msg, error) {
	if m, ok := scanEvent(frame); ok {
		return m, nil
	}
	return decode(frame)
}

// EventFields returns the top-level "id" and "created_at" of an event
// object's bytes, with the rules Parse applies to an EVENT frame's object.
func EventFields(obj []byte) (id [32]byte, createdAt int64, err error) {
	if end, id, createdAt, ok := scanEventObject(obj, 0); ok && end == len(obj) {
		return id, createdAt, nil
	}
	// The scanner was unsure: let the decoder judge it inside a frame.
	f := make([]byte, 0, len(obj)+16)
	f = append(append(append(f, `["EVENT","",`...), obj...), ']')
	m, err := decode(f)
	if err != nil {
		return id, 0, err
	}
	return m.ID, m.CreatedAt, nil
}
