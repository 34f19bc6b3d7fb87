package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Parse decodes one event object as a relay sent it: any key order, any
// whitespace, any JSON escapes. It is strict where leniency would let two
// readers disagree about the event: duplicate keys, missing keys, ids and
// keys that are not 64/128 lowercase hex, non-integer numbers, invalid
// UTF-8, and trailing bytes are all errors wrapping ErrMalformed. Unknown
// keys are ignored (they are not part of the id).
func Parse(raw []byte) (*Event, error) {
	if !utf8.Valid(raw) {
		return nil, fmt.Errorf("%w: invalid UTF-8", ErrMalformed)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	var (
		e    Event
		seen uint8
	)
	const (
		hasID = 1 << iota
		hasPubKey
		hasCreatedAt
		hasKind
		hasTags
		hasContent
		hasSig
		hasAll = 1<<iota - 1
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		key, _ := tok.(string)
		var bit uint8
		switch key {
		case "id":
			bit = hasID
			err = decodeHexField(dec, e.ID[:])
		case "pubkey":
			bit = hasPubKey
			err = decodeHexField(dec, e.PubKey[:])
		case "sig":
			bit = hasSig
			err = decodeHexField(dec, e.Sig[:])
		case "created_at":
			bit = hasCreatedAt
			e.CreatedAt, err = decodeInt(dec, 0, 1<<53)
		case "kind":
			bit = hasKind
			var k int64
			k, err = decodeInt(dec, 0, 65535)
			e.Kind = int(k)
		case "tags":
			bit = hasTags
			err = decodeTags(dec, &e.Tags)
		case "content":
			bit = hasContent
			err = decodeStrict(dec, &e.Content)
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: field %q: %v", ErrMalformed, key, err)
		}
		if seen&bit != 0 {
			return nil, fmt.Errorf("%w: duplicate key %q", ErrMalformed, key)
		}
		seen |= bit
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("%w: trailing data after object", ErrMalformed)
	}
	if seen != hasAll {
		return nil, fmt.Errorf("%w: missing %s", ErrMalformed, missing(seen))
	}
	return &e, nil
}

func missing(seen uint8) string {
	names := []string{"id", "pubkey", "created_at", "kind", "tags", "content", "sig"}
	var out []byte
	for i, n := range names {
		if seen&(1<<i) == 0 {
			if len(out) > 0 {
				out = append(out, ',')
			}
			out = append(out, n...)
		}
	}
	return string(out)
}

// decodeStrict decodes one value into a Go string, refusing null (which
// encoding/json would silently accept as "").
func decodeStrict(dec *json.Decoder, s *string) error {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	if len(raw) == 0 || raw[0] != '"' {
		return fmt.Errorf("not a string")
	}
	return json.Unmarshal(raw, s)
}

func decodeHexField(dec *json.Decoder, dst []byte) error {
	var s string
	if err := decodeStrict(dec, &s); err != nil {
		return err
	}
	return decodeLowerHex(dst, []byte(s))
}

func decodeInt(dec *json.Decoder, lo, hi int64) (int64, error) {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return 0, err
	}
	// Only plain integers: no fraction, no exponent, no leading zeros.
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || (len(raw) > 1 && raw[0] == '0') || (len(raw) > 2 && raw[0] == '-' && raw[1] == '0') {
		return 0, fmt.Errorf("not an integer: %.20s", raw)
	}
	if v < lo || v > hi {
		return 0, fmt.Errorf("%d out of range [%d,%d]", v, lo, hi)
	}
	return v, nil
}

func decodeTags(dec *json.Decoder, tags *[][]string) error {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	if raw[0] != '[' {
		return fmt.Errorf("tags is not an array")
	}
	var generic []json.RawMessage
	if err := json.Unmarshal(raw, &generic); err != nil {
		return err
	}
	out := make([][]string, len(generic))
	for i, t := range generic {
		if len(t) == 0 || t[0] != '[' {
			return fmt.Errorf("tag %d is not an array", i)
		}
		var items []json.RawMessage
		if err := json.Unmarshal(t, &items); err != nil {
			return err
		}
		tag := make([]string, len(items))
		for j, it := range items {
			if len(it) == 0 || it[0] != '"' {
				return fmt.Errorf("tag %d item %d is not a string", i, j)
			}
			if err := json.Unmarshal(it, &tag[j]); err != nil {
				return err
			}
		}
		out[i] = tag
	}
	*tags = out
	return nil
}
