package frame

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/nostr-archiver/archiver/event"
)

// decode is the slow, exact path: encoding/json reads the frame token by
// token. It handles every label other than EVENT and every EVENT frame
// the scanner was not sure of, and it alone decides what is an error.
func decode(frame []byte) (Msg, error) {
	d := json.NewDecoder(bytes.NewReader(frame))
	if tok, err := d.Token(); err != nil || tok != json.Delim('[') {
		return Msg{}, fmt.Errorf("%w: not a JSON array", ErrMalformed)
	}
	tok, err := d.Token()
	text, ok := tok.(string)
	if err != nil || !ok {
		return Msg{}, fmt.Errorf("%w: no string label", ErrMalformed)
	}
	m := Msg{Label: labels[text]}
	if m.Label == Event {
		return decodeEvent(frame, d, m)
	}

	var args []json.RawMessage
	for d.More() {
		var a json.RawMessage
		if err := d.Decode(&a); err != nil {
			return m, fmt.Errorf("%w: %q: %v", ErrMalformed, text, err)
		}
		args = append(args, a)
	}
	if err := endArray(d); err != nil {
		return m, fmt.Errorf("%w: %q: %v", ErrMalformed, text, err)
	}
	if err := m.setArgs(text, args); err != nil {
		return Msg{Label: m.Label}, fmt.Errorf("%w: %q: %v", ErrMalformed, text, err)
	}
	return m, nil
}

// setArgs fills m from the elements after the label. Elements a label
// requires must be present and of the right type; trailing ones are
// ignored (strfry appends its limit to NEG-ERR).
func (m *Msg) setArgs(text string, args []json.RawMessage) error {
	switch m.Label {
	case EOSE:
		return stringArg(args, 0, true, &m.SubID)
	case Closed:
		return errors.Join(stringArg(args, 0, true, &m.SubID), stringArg(args, 1, false, &m.Message))
	case Notice, Auth:
		return stringArg(args, 0, true, &m.Message)
	case NegMsg, NegErr:
		return errors.Join(stringArg(args, 0, true, &m.SubID), stringArg(args, 1, true, &m.Message))
	case OK:
		var id string
		if err := stringArg(args, 0, true, &id); err != nil {
			return err
		}
		if err := event.DecodeHex32(&m.ID, []byte(id)); err != nil {
			return fmt.Errorf("event id: %w", err)
		}
		switch {
		case len(args) < 2:
			return errors.New("element 2 missing")
		case string(args[1]) == "true":
			m.Accepted = true
		case string(args[1]) != "false":
			return errors.New("element 2 is not a boolean")
		}
		return stringArg(args, 2, false, &m.Message)
	case Count:
		if err := stringArg(args, 0, true, &m.SubID); err != nil {
			return err
		}
		if len(args) < 2 {
			return errors.New("no count object")
		}
		seen := false
		err := topLevel(args[1], func(key string, val []byte) error {
			switch key {
			case "approximate", "limited":
				// Any value but false (or null, which is absent) is taken
				// as not exact: that side never proves a range it should not.
				m.Approximate = m.Approximate || string(val) != "false" && string(val) != "null"
				return nil
			case "count":
			default:
				return nil
			}
			if seen {
				return errors.New(`duplicate "count"`)
			}
			seen = true
			var ok bool
			if m.Count, ok = jsonUint(val); !ok {
				return fmt.Errorf("count %.20s is not a non-negative integer", val)
			}
			return nil
		})
		if err == nil && !seen {
			err = errors.New(`no "count"`)
		}
		return err
	default:
		m.Message = text
		return nil
	}
}

// stringArg decodes args[i] into dst if it is a JSON string. encoding/json
// would decode null as "" silently; null is not a string here.
func stringArg(args []json.RawMessage, i int, required bool, dst *string) error {
	if i >= len(args) {
		if required {
			return fmt.Errorf("element %d missing", i+1)
		}
		return nil
	}
	if args[i][0] != '"' || json.Unmarshal(args[i], dst) != nil {
		return fmt.Errorf("element %d is not a string", i+1)
	}
	return nil
}

// decodeEvent reads the rest of an EVENT frame after its label. Once the
// subscription id is known every defect is ErrBadEvent, so that the copy
// can be quarantined under the relay's name.
func decodeEvent(frame []byte, d *json.Decoder, m Msg) (Msg, error) {
	tok, err := d.Token()
	sub, ok := tok.(string)
	if err != nil || !ok {
		return m, fmt.Errorf("%w: EVENT without a string subscription id", ErrMalformed)
	}
	m.SubID = sub

	afterSub := int(d.InputOffset())
	var obj json.RawMessage
	if err := d.Decode(&obj); err != nil {
		m.Raw = thirdElement(frame, afterSub)
		return m, fmt.Errorf("%w: event object: %v", ErrBadEvent, err)
	}
	// The decoder copied the value; point Raw at the received bytes.
	end := int(d.InputOffset())
	m.Raw = frame[end-len(obj) : end : end]
	if err := endArray(d); err != nil {
		return m, fmt.Errorf("%w: %v", ErrBadEvent, err)
	}

	var seenID, seenCreatedAt bool
	var id [32]byte
	var createdAt int64
	err = topLevel(m.Raw, func(key string, val []byte) error {
		switch key {
		case "id":
			if seenID {
				return errors.New(`duplicate "id"`)
			}
			seenID = true
			var s string
			if val[0] != '"' || json.Unmarshal(val, &s) != nil {
				return errors.New(`"id" is not a string`)
			}
			if err := event.DecodeHex32(&id, []byte(s)); err != nil {
				return fmt.Errorf(`"id": %w`, err)
			}
		case "created_at":
			if seenCreatedAt {
				return errors.New(`duplicate "created_at"`)
			}
			seenCreatedAt = true
			var ok bool
			if createdAt, ok = jsonUint(val); !ok {
				return fmt.Errorf(`"created_at" %.20s is not a non-negative integer`, val)
			}
		}
		return nil
	})
	switch {
	case err != nil:
	case !seenID:
		err = errors.New(`no top-level "id"`)
	case !seenCreatedAt:
		err = errors.New(`no top-level "created_at"`)
	}
	if err != nil {
		return m, fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	m.ID, m.CreatedAt = id, createdAt
	return m, nil
}

// endArray consumes the closing ']' of the frame and requires that only
// whitespace follows it.
func endArray(d *json.Decoder) error {
	if tok, err := d.Token(); err != nil || tok != json.Delim(']') {
		return errors.New("more elements than expected or no closing ']'")
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("trailing bytes after the frame")
	}
	return nil
}

// topLevel calls fn for each key of the JSON object obj, in order, with
// the key decoded (escapes resolved) and the value's raw bytes.
func topLevel(obj []byte, fn func(key string, val []byte) error) error {
	d := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("not a JSON object")
	}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		var val json.RawMessage
		if err := d.Decode(&val); err != nil {
			return err
		}
		if err := fn(tok.(string), val); err != nil {
			return err
		}
	}
	_, err := d.Token()
	return err
}

// jsonUint reads a whole JSON value that must be a non-negative integer
// fitting an int64, with no fraction or exponent. "-0" is zero: event.Parse
// takes it, and the verifier must never accept what the receive path
// refused.
func jsonUint(val []byte) (int64, bool) {
	if string(val) == "-0" {
		return 0, true
	}
	v, end := scanUint(val, 0)
	return v, end == len(val)
}

// thirdElement locates, as best it can, the third element of an EVENT
// frame whose object did not decode: from the first byte after the comma
// that follows the sub id (at offset afterSub) to the end of the frame,
// without trailing whitespace and a final ']'.
func thirdElement(frame []byte, afterSub int) []byte {
	i := skipWS(frame, afterSub)
	if i >= len(frame) || frame[i] != ',' {
		return nil
	}
	i = skipWS(frame, i+1)
	raw := bytes.TrimRight(frame[i:], " \t\r\n")
	raw = bytes.TrimRight(bytes.TrimSuffix(raw, []byte("]")), " \t\r\n")
	if len(raw) == 0 {
		return nil
	}
	return raw[:len(raw):len(raw)]
}
