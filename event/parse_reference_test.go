package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// parseReference is the encoding/json implementation Parse replaced, kept
// as the oracle for FuzzParse and the comparison benchmarks. Its results
// (accept/reject, and the decoded Event) are the specification.
func parseReference(raw []byte) (*Event, error) {
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
			err = refDecodeHex(dec, e.ID[:])
		case "pubkey":
			bit = hasPubKey
			err = refDecodeHex(dec, e.PubKey[:])
		case "sig":
			bit = hasSig
			err = refDecodeHex(dec, e.Sig[:])
		case "created_at":
			bit = hasCreatedAt
			e.CreatedAt, err = refDecodeInt(dec, 0, 1<<53)
		case "kind":
			bit = hasKind
			var k int64
			k, err = refDecodeInt(dec, 0, 65535)
			e.Kind = int(k)
		case "tags":
			bit = hasTags
			err = refDecodeTags(dec, &e.Tags)
		case "content":
			bit = hasContent
			err = refDecodeString(dec, &e.Content)
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
	// The one change from the original: it called dec.Token() here and
	// failed only if that succeeded, so `{...}}`, `{...}x` or `{...},`
	// (where Token itself errors) were accepted despite trailing bytes.
	if len(bytes.TrimLeft(raw[dec.InputOffset():], " \t\r\n")) != 0 {
		return nil, fmt.Errorf("%w: trailing data after object", ErrMalformed)
	}
	if seen != hasAll {
		return nil, fmt.Errorf("%w: missing %s", ErrMalformed, missing(seen))
	}
	return &e, nil
}

// refDecodeString decodes one value into a Go string, refusing null (which
// encoding/json would silently accept as "").
func refDecodeString(dec *json.Decoder, s *string) error {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	if len(raw) == 0 || raw[0] != '"' {
		return fmt.Errorf("not a string")
	}
	return json.Unmarshal(raw, s)
}

func refDecodeHex(dec *json.Decoder, dst []byte) error {
	var s string
	if err := refDecodeString(dec, &s); err != nil {
		return err
	}
	return decodeLowerHex(dst, []byte(s))
}

func refDecodeInt(dec *json.Decoder, lo, hi int64) (int64, error) {
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

func refDecodeTags(dec *json.Decoder, tags *[][]string) error {
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
