package frame

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nostr-archiver/archiver/event"
)

// oracleEvent is what encoding/json alone makes of an EVENT frame.
type oracleEvent struct {
	sub       string
	raw       []byte
	id        [32]byte
	createdAt int64
}

var plainInt = regexp.MustCompile(`^(-?0|[1-9][0-9]*)$`)

// oracle decodes frame with encoding/json, independently of Parse's
// code, and reports the label and, when the frame is a well-formed EVENT
// (exactly three elements, a string sub id, an object with exactly one
// top-level "id" of 64 lowercase hex and one "created_at" that is a
// non-negative int64), its fields.
func oracle(frame []byte) (label string, ev oracleEvent, ok bool) {
	var arr []json.RawMessage
	if json.Unmarshal(frame, &arr) != nil || len(arr) == 0 ||
		arr[0][0] != '"' || json.Unmarshal(arr[0], &label) != nil {
		return "", ev, false
	}
	if label != "EVENT" || len(arr) != 3 || arr[1][0] != '"' || json.Unmarshal(arr[1], &ev.sub) != nil {
		return label, ev, false
	}
	ev.raw = arr[2]
	var fields map[string]json.RawMessage
	if json.Unmarshal(ev.raw, &fields) != nil || fields == nil {
		return label, ev, false
	}
	if n := countKeys(ev.raw); n["id"] != 1 || n["created_at"] != 1 {
		return label, ev, false
	}
	var id string
	if fields["id"][0] != '"' || json.Unmarshal(fields["id"], &id) != nil ||
		id != strings.ToLower(id) || len(id) != 64 {
		return label, ev, false
	}
	if _, err := hex.Decode(ev.id[:], []byte(id)); err != nil {
		return label, ev, false
	}
	ca := string(fields["created_at"])
	if !plainInt.MatchString(ca) {
		return label, ev, false
	}
	var err error
	if ev.createdAt, err = strconv.ParseInt(ca, 10, 64); err != nil {
		return label, ev, false
	}
	return label, ev, true
}

// countKeys counts the top-level keys of a valid JSON object by walking
// its token stream and tracking depth.
func countKeys(obj []byte) map[string]int {
	n := map[string]int{}
	d := json.NewDecoder(bytes.NewReader(obj))
	depth, wantKey := 0, false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return n
		}
		if err != nil {
			panic(err) // obj was validated by json.Unmarshal
		}
		switch tok := tok.(type) {
		case json.Delim:
			if tok == '{' || tok == '[' {
				depth++
			} else {
				depth--
			}
			wantKey = depth == 1
			continue
		case string:
			if depth == 1 && wantKey {
				n[tok]++
				wantKey = false
				continue
			}
		}
		wantKey = depth == 1 // a scalar value at depth 1 precedes a key
	}
}

func TestOracle(t *testing.T) {
	for _, tc := range eventCases {
		_, _, ok := oracle([]byte(tc.frame))
		if ok != (tc.err == nil) {
			t.Errorf("%s: oracle says well-formed = %v", tc.name, ok)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, tc := range append(append([]parseCase(nil), eventCases...), otherCases...) {
		f.Add([]byte(tc.frame))
	}
	for seed := range uint64(4) {
		f.Add(realisticFrame(600+int(seed)*300, seed))
	}
	f.Fuzz(checkParse)
}

// FuzzEventObject keeps the envelope of an EVENT frame well-formed so that
// the fuzzer spends its time inside the event object.
func FuzzEventObject(f *testing.F) {
	for _, tc := range eventCases {
		frame := []byte(tc.frame)
		if m, err := decode(frame); m.Raw != nil && (err == nil || errors.Is(err, ErrBadEvent)) {
			f.Add(m.SubID, m.Raw)
		}
	}
	f.Fuzz(func(t *testing.T, sub string, obj []byte) {
		frame, _ := json.Marshal(sub) // invalid UTF-8 becomes U+FFFD: still a string
		frame = append(append([]byte(`["EVENT",`), frame...), ',')
		checkParse(t, append(append(frame, obj...), ']'))
	})
}

// checkParse holds Parse to encoding/json on one input.
func checkParse(t *testing.T, frame []byte) {
	m, err := Parse(frame)
	label, ev, ok := oracle(frame)

	switch {
	case err == nil && m.Label == Event:
		if !ok || m.SubID != ev.sub || m.ID != ev.id || m.CreatedAt != ev.createdAt || !bytes.Equal(m.Raw, ev.raw) {
			t.Fatalf("Parse = %+v (raw %q), encoding/json: well-formed %v %+v (raw %q)", m, m.Raw, ok, ev, ev.raw)
		}
	case ok:
		t.Fatalf("well-formed EVENT, Parse = %+v, %v", m, err)
	case err == nil:
		if !json.Valid(frame) || (m.Label == Unknown && m.Message != label) ||
			(m.Label != Unknown && m.Label.String() != label) {
			t.Fatalf("Parse = %+v, encoding/json label %q, valid %v", m, label, json.Valid(frame))
		}
	case errors.Is(err, ErrBadEvent):
		if m.Label != Event || (json.Valid(frame) && label != "EVENT") {
			t.Fatalf("ErrBadEvent with %+v", m)
		}
	case !errors.Is(err, ErrMalformed):
		t.Fatalf("error %v wraps neither sentinel", err)
	}
	if !within(frame, m.Raw) || cap(m.Raw) != len(m.Raw) {
		t.Fatalf("Raw %q is not a clipped sub-slice of the frame", m.Raw)
	}

	// An event the strict verifier accepts has a usable id and created_at.
	if ev.raw != nil {
		if e, perr := event.Parse(ev.raw); perr == nil && (err != nil || e.ID != m.ID || e.CreatedAt != m.CreatedAt) {
			t.Fatalf("event.Parse accepts %q, Parse = %+v, %v", ev.raw, m, err)
		}
	}

	// Whatever the scanner accepts, encoding/json must read the same.
	if fast, ok := scanEvent(frame); ok {
		slow, err := decode(frame)
		if err != nil || !msgEqual(fast, slow) || &fast.Raw[0] != &slow.Raw[0] {
			t.Fatalf("scanner %+v, decoder %+v, %v", fast, slow, err)
		}
	}
}

// FuzzSkipValue holds the scanner's JSON syntax check to json.Valid on
// single values, where the fuzzer reaches number and escape corner cases
// quickly.
func FuzzSkipValue(f *testing.F) {
	for _, v := range skipValueCases {
		f.Add([]byte(v))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		v = bytes.Trim(v, " \t\r\n")
		end := skipValue(v, 0, 0)
		valid := json.Valid(v)
		switch {
		case end == len(v) && !valid:
			t.Fatalf("scanner accepts invalid %q", v)
		case end != len(v) && valid && end >= 0:
			t.Fatalf("scanner stops at %d in valid %q", end, v)
		case end < 0 && valid && nesting(v) < maxDepth:
			t.Fatalf("scanner gives up on valid %q", v)
		}
	})
}

// nesting returns the deepest array/object nesting of a valid JSON value.
func nesting(v []byte) int {
	d := json.NewDecoder(bytes.NewReader(v))
	depth, deepest := 0, 0
	for {
		tok, err := d.Token()
		if err != nil {
			return deepest
		}
		if delim, ok := tok.(json.Delim); ok {
			if delim == '{' || delim == '[' {
				depth++
				deepest = max(deepest, depth)
			} else {
				depth--
			}
		}
	}
}
