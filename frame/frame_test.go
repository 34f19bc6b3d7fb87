package frame

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

const (
	id1 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	id2 = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"
	pk  = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798"
	sig = "e907831f80848d1069a5371b402410364bdf1c5f8307b0084c55f1ce2dca821525f66a4a85ea8b71e482a74f382d2ce5ebeee8fdb2172f477df4900d310536c0"
)

// obj builds an event object with the given members between the usual ones.
func obj(members ...string) string {
	return `{` + strings.Join(members, `,`) + `}`
}

var (
	canonical = obj(`"id":"`+id1+`"`, `"pubkey":"`+pk+`"`, `"created_at":1700000000`, `"kind":1`,
		`"tags":[["e","`+id2+`"],["p","`+pk+`"]]`, `"content":"hello"`, `"sig":"`+sig+`"`)
	reversed = obj(`"sig":"`+sig+`"`, `"content":"hello"`, `"tags":[]`, `"kind":1`, `"pubkey":"`+pk+`"`,
		`"created_at":1700000000`, `"id":"`+id1+`"`)
)

func mustHex32(s string) (a [32]byte) {
	if _, err := hex.Decode(a[:], []byte(s)); err != nil {
		panic(err)
	}
	return a
}

// within reports whether inner lies inside outer's memory: Raw must be a
// sub-slice of the frame, never a copy.
func within(outer, inner []byte) bool {
	if len(inner) == 0 {
		return true
	}
	o := uintptr(unsafe.Pointer(unsafe.SliceData(outer)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(inner)))
	return p >= o && p+uintptr(len(inner)) <= o+uintptr(len(outer))
}

type parseCase struct {
	name  string
	frame string
	fast  bool // the byte scanner alone must handle it
	want  Msg  // Raw compared as bytes
	err   error
}

func eventMsg(sub, raw, id string, createdAt int64) Msg {
	return Msg{Label: Event, SubID: sub, Raw: []byte(raw), ID: mustHex32(id), CreatedAt: createdAt}
}

func badEvent(sub, raw string) Msg {
	m := Msg{Label: Event, SubID: sub}
	if raw != "" {
		m.Raw = []byte(raw)
	}
	return m
}

var eventCases = []parseCase{
	{name: "canonical", frame: `["EVENT","sub1",` + canonical + `]`, fast: true,
		want: eventMsg("sub1", canonical, id1, 1700000000)},
	{name: "reversed key order", frame: `["EVENT","sub1",` + reversed + `]`, fast: true,
		want: eventMsg("sub1", reversed, id1, 1700000000)},
	{name: "whitespace everywhere",
		frame: " \r\n[ \t\"EVENT\" ,\n\t\"s\" \r\n, { \"created_at\" :\t42 ,\n  \"tags\" : [ [ \"t\" , \"x\" ] , [ ] ] ,\r\n \"id\"\n:\n\"" + id1 + "\" \t}\n ]\r\n\t ",
		fast:  true,
		want:  eventMsg("s", "{ \"created_at\" :\t42 ,\n  \"tags\" : [ [ \"t\" , \"x\" ] , [ ] ] ,\r\n \"id\"\n:\n\""+id1+"\" \t}", id1, 42)},
	{name: "lookalike in content", fast: true,
		frame: `["EVENT","s",` + obj(`"content":"{\"id\":\"`+id2+`\",\"created_at\":1}"`, `"created_at":7`, `"id":"`+id1+`"`) + `]`,
		want:  eventMsg("s", obj(`"content":"{\"id\":\"`+id2+`\",\"created_at\":1}"`, `"created_at":7`, `"id":"`+id1+`"`), id1, 7)},
	{name: "lookalike after escaped backslash", fast: true,
		frame: `["EVENT","s",` + obj(`"content":"x\\"`, `"id":"`+id1+`"`, `"z":"\\\",\"id\":\"`+id2+`\""`, `"created_at":8`) + `]`,
		want:  eventMsg("s", obj(`"content":"x\\"`, `"id":"`+id1+`"`, `"z":"\\\",\"id\":\"`+id2+`\""`, `"created_at":8`), id1, 8)},
	{name: "lookalike in tags", fast: true,
		frame: `["EVENT","s",` + obj(`"tags":[["id","`+id2+`"],[{"id":"`+id2+`","created_at":1}]]`, `"id":"`+id1+`"`, `"created_at":9`) + `]`,
		want:  eventMsg("s", obj(`"tags":[["id","`+id2+`"],[{"id":"`+id2+`","created_at":1}]]`, `"id":"`+id1+`"`, `"created_at":9`), id1, 9)},
	{name: "lookalike in nested object", fast: true,
		frame: `["EVENT","s",` + obj(`"extra":{"id":"`+id2+`","created_at":5,"deeper":{"id":"`+id2+`"}}`, `"id":"`+id1+`"`, `"created_at":10`) + `]`,
		want:  eventMsg("s", obj(`"extra":{"id":"`+id2+`","created_at":5,"deeper":{"id":"`+id2+`"}}`, `"id":"`+id1+`"`, `"created_at":10`), id1, 10)},
	{name: "escapes and unicode in content", fast: true,
		frame: `["EVENT","s",` + obj(`"content":"\"q\" \\ \/ \b\f\n\r\t \u00e9\uD83D\uDE00 é😀 </script>"`, `"id":"`+id1+`"`, `"created_at":0`) + `]`,
		want:  eventMsg("s", obj(`"content":"\"q\" \\ \/ \b\f\n\r\t \u00e9\uD83D\uDE00 é😀 </script>"`, `"id":"`+id1+`"`, `"created_at":0`), id1, 0)},
	{name: "all JSON value kinds skipped", fast: true,
		frame: `["EVENT","s",` + obj(`"a":[true,false,null,-0.5e+3,0,12E-1,{}]`, `"id":"`+id1+`"`, `"created_at":11`) + `]`,
		want:  eventMsg("s", obj(`"a":[true,false,null,-0.5e+3,0,12E-1,{}]`, `"id":"`+id1+`"`, `"created_at":11`), id1, 11)},
	{name: "unicode-escaped key", // the scanner cannot tell; the decoder can
		frame: `["EVENT","s",` + obj(`"\u0069d":"`+id1+`"`, `"created_at":12`) + `]`,
		want:  eventMsg("s", obj(`"\u0069d":"`+id1+`"`, `"created_at":12`), id1, 12)},
	{name: "escaped id value",
		frame: `["EVENT","s",` + obj(`"id":"\u0030`+id1[1:]+`"`, `"created_at":13`) + `]`,
		want:  eventMsg("s", obj(`"id":"\u0030`+id1[1:]+`"`, `"created_at":13`), id1, 13)},
	{name: "sub id with escapes",
		frame: `["EVENT","s\"u\\b\u00e9",` + canonical + `]`,
		want:  eventMsg("s\"u\\bé", canonical, id1, 1700000000)},
	{name: "sub id with raw UTF-8",
		frame: `["EVENT","é",` + canonical + `]`,
		want:  eventMsg("é", canonical, id1, 1700000000)},
	{name: "empty sub id", fast: true,
		frame: `["EVENT","",` + canonical + `]`,
		want:  eventMsg("", canonical, id1, 1700000000)},
	{name: "escaped label",
		frame: `["EV\u0045NT","s",` + canonical + `]`,
		want:  eventMsg("s", canonical, id1, 1700000000)},
	{name: "nesting deeper than the scanner follows",
		frame: `["EVENT","s",` + obj(`"d":`+strings.Repeat("[", 100)+strings.Repeat("]", 100), `"id":"`+id1+`"`, `"created_at":14`) + `]`,
		want:  eventMsg("s", obj(`"d":`+strings.Repeat("[", 100)+strings.Repeat("]", 100), `"id":"`+id1+`"`, `"created_at":14`), id1, 14)},
	{name: "duplicate other key is fine", fast: true,
		frame: `["EVENT","s",` + obj(`"kind":1`, `"kind":2`, `"id":"`+id1+`"`, `"created_at":15`) + `]`,
		want:  eventMsg("s", obj(`"kind":1`, `"kind":2`, `"id":"`+id1+`"`, `"created_at":15`), id1, 15)},
	{name: "minus zero created_at",
		frame: `["EVENT","s",` + obj(`"id":"`+id1+`"`, `"created_at":-0`) + `]`,
		want:  eventMsg("s", obj(`"id":"`+id1+`"`, `"created_at":-0`), id1, 0)},
	{name: "max int64 created_at", fast: true,
		frame: `["EVENT","s",` + obj(`"id":"`+id1+`"`, `"created_at":9223372036854775807`) + `]`,
		want:  eventMsg("s", obj(`"id":"`+id1+`"`, `"created_at":9223372036854775807`), id1, 9223372036854775807)},

	{name: "duplicate id", err: ErrBadEvent,
		frame: `["EVENT","s",` + obj(`"id":"`+id1+`"`, `"created_at":1`, `"id":"`+id2+`"`) + `]`,
		want:  badEvent("s", obj(`"id":"`+id1+`"`, `"created_at":1`, `"id":"`+id2+`"`))},
	{name: "duplicate id via escaped key", err: ErrBadEvent,
		frame: `["EVENT","s",` + obj(`"id":"`+id1+`"`, `"created_at":1`, `"i\u0064":"`+id1+`"`) + `]`,
		want:  badEvent("s", obj(`"id":"`+id1+`"`, `"created_at":1`, `"i\u0064":"`+id1+`"`))},
	{name: "duplicate created_at", err: ErrBadEvent,
		frame: `["EVENT","s",` + obj(`"created_at":1`, `"id":"`+id1+`"`, `"created_at":1`) + `]`,
		want:  badEvent("s", obj(`"created_at":1`, `"id":"`+id1+`"`, `"created_at":1`))},
	{name: "only a lookalike id", err: ErrBadEvent,
		frame: `["EVENT","s",` + obj(`"content":"\"id\":\"`+id2+`\""`, `"tags":[["id","`+id2+`"]]`, `"created_at":1`) + `]`,
		want:  badEvent("s", obj(`"content":"\"id\":\"`+id2+`\""`, `"tags":[["id","`+id2+`"]]`, `"created_at":1`))},
	{name: "uppercase id", err: ErrBadEvent,
		frame: `["EVENT","s",` + obj(`"id":"`+strings.ToUpper(id1)+`"`, `"created_at":1`) + `]`,
		want:  badEvent("s", obj(`"id":"`+strings.ToUpper(id1)+`"`, `"created_at":1`))},
	{name: "short id", err: ErrBadEvent,
		frame: `["EVENT","s",` + obj(`"id":"`+id1[2:]+`"`, `"created_at":1`) + `]`,
		want:  badEvent("s", obj(`"id":"`+id1[2:]+`"`, `"created_at":1`))},
	{name: "numeric id", err: ErrBadEvent,
		frame: `["EVENT","s",{"id":12,"created_at":1}]`, want: badEvent("s", `{"id":12,"created_at":1}`)},
	{name: "no created_at", err: ErrBadEvent,
		frame: `["EVENT","s",{"id":"` + id1 + `"}]`, want: badEvent("s", `{"id":"`+id1+`"}`)},
	{name: "empty object", err: ErrBadEvent,
		frame: `["EVENT","s",{}]`, want: badEvent("s", `{}`)},
	{name: "fractional created_at", err: ErrBadEvent,
		frame: `["EVENT","s",{"id":"` + id1 + `","created_at":1.5}]`, want: badEvent("s", `{"id":"`+id1+`","created_at":1.5}`)},
	{name: "integral float created_at", err: ErrBadEvent,
		frame: `["EVENT","s",{"id":"` + id1 + `","created_at":1.0}]`, want: badEvent("s", `{"id":"`+id1+`","created_at":1.0}`)},
	{name: "exponent created_at", err: ErrBadEvent,
		frame: `["EVENT","s",{"id":"` + id1 + `","created_at":17e8}]`, want: badEvent("s", `{"id":"`+id1+`","created_at":17e8}`)},
	{name: "negative created_at", err: ErrBadEvent,
		frame: `["EVENT","s",{"id":"` + id1 + `","created_at":-1}]`, want: badEvent("s", `{"id":"`+id1+`","created_at":-1}`)},
	{name: "string created_at", err: ErrBadEvent,
		frame: `["EVENT","s",{"id":"` + id1 + `","created_at":"1"}]`, want: badEvent("s", `{"id":"`+id1+`","created_at":"1"}`)},
	{name: "overflowing created_at", err: ErrBadEvent,
		frame: `["EVENT","s",{"id":"` + id1 + `","created_at":9223372036854775808}]`,
		want:  badEvent("s", `{"id":"`+id1+`","created_at":9223372036854775808}`)},
	{name: "leading zero created_at (invalid JSON)", err: ErrBadEvent,
		frame: `["EVENT","s",{"id":"` + id1 + `","created_at":01}]`, want: badEvent("s", `{"id":"`+id1+`","created_at":01}`)},
	{name: "raw control character in content", err: ErrBadEvent,
		frame: "[\"EVENT\",\"s\",{\"content\":\"a\nb\",\"id\":\"" + id1 + "\",\"created_at\":1}]",
		want:  badEvent("s", "{\"content\":\"a\nb\",\"id\":\""+id1+"\",\"created_at\":1}")},
	{name: "bad escape in content", err: ErrBadEvent,
		frame: `["EVENT","s",{"content":"\x","id":"` + id1 + `","created_at":1}]`,
		want:  badEvent("s", `{"content":"\x","id":"`+id1+`","created_at":1}`)},
	{name: "invalid tags", err: ErrBadEvent,
		frame: `["EVENT","s",{"tags":[["a",]],"id":"` + id1 + `","created_at":1}]`,
		want:  badEvent("s", `{"tags":[["a",]],"id":"`+id1+`","created_at":1}`)},
	{name: "truncated in object", err: ErrBadEvent,
		frame: `["EVENT","s",{"id":"` + id1 + `","crea`, want: badEvent("s", `{"id":"`+id1+`","crea`)},
	{name: "truncated after object", err: ErrBadEvent,
		frame: `["EVENT","s",` + canonical, want: badEvent("s", canonical)},
	{name: "no object", err: ErrBadEvent, frame: `["EVENT","s"]`, want: badEvent("s", "")},
	{name: "truncated after comma", err: ErrBadEvent, frame: `["EVENT","s", `, want: badEvent("s", "")},
	{name: "object is an array", err: ErrBadEvent, frame: `["EVENT","s",[1]]`, want: badEvent("s", `[1]`)},
	{name: "extra element", err: ErrBadEvent,
		frame: `["EVENT","s",` + canonical + `,{}]`, want: badEvent("s", canonical)},
	{name: "trailing garbage", err: ErrBadEvent,
		frame: `["EVENT","s",` + canonical + `]x`, want: badEvent("s", canonical)},
	{name: "second frame glued on", err: ErrBadEvent,
		frame: `["EVENT","s",` + canonical + `]["EOSE","s"]`, want: badEvent("s", canonical)},
	{name: "trailing NUL", err: ErrBadEvent,
		frame: `["EVENT","s",` + canonical + "]\x00", want: badEvent("s", canonical)},
	{name: "truncated sub id", err: ErrMalformed, frame: `["EVENT","su`, want: Msg{Label: Event}},
	{name: "no sub id", err: ErrMalformed, frame: `["EVENT"]`, want: Msg{Label: Event}},
	{name: "numeric sub id", err: ErrMalformed, frame: `["EVENT",1,` + canonical + `]`, want: Msg{Label: Event}},
}

var otherCases = []parseCase{
	{name: "EOSE", frame: `["EOSE","sub1"]`, want: Msg{Label: EOSE, SubID: "sub1"}},
	{name: "EOSE escaped sub", frame: `[ "EOSE" , "a\u0062\"" ]`, want: Msg{Label: EOSE, SubID: `ab"`}},
	{name: "CLOSED", frame: `["CLOSED","sub1","rate-limited: slow down"]`,
		want: Msg{Label: Closed, SubID: "sub1", Message: "rate-limited: slow down"}},
	{name: "CLOSED strfry prefix", frame: `["CLOSED","sub1","ERROR: auth-required: please auth"]`,
		want: Msg{Label: Closed, SubID: "sub1", Message: "ERROR: auth-required: please auth"}},
	{name: "CLOSED without reason", frame: `["CLOSED","sub1"]`, want: Msg{Label: Closed, SubID: "sub1"}},
	{name: "NOTICE strfry prefix", frame: `["NOTICE","ERROR: too many concurrent REQs"]`,
		want: Msg{Label: Notice, Message: "ERROR: too many concurrent REQs"}},
	{name: "NOTICE escapes", frame: `["NOTICE","a\nb \u00e9"]`, want: Msg{Label: Notice, Message: "a\nb é"}},
	{name: "AUTH", frame: `["AUTH","challenge-1234"]`, want: Msg{Label: Auth, Message: "challenge-1234"}},
	{name: "OK accepted", frame: `["OK","` + id1 + `",true,""]`, want: Msg{Label: OK, ID: mustHex32(id1), Accepted: true}},
	{name: "OK refused", frame: `["OK","` + id1 + `",false,"duplicate: have it"]`,
		want: Msg{Label: OK, ID: mustHex32(id1), Message: "duplicate: have it"}},
	{name: "COUNT", frame: `["COUNT","c1",{"count":238}]`, want: Msg{Label: Count, SubID: "c1", Count: 238}},
	{name: "COUNT exact", frame: `["COUNT","c1",{"count":238,"approximate":false,"limited":null}]`,
		want: Msg{Label: Count, SubID: "c1", Count: 238}},
	{name: "COUNT approximate", frame: `["COUNT","c1",{"count":238,"approximate":true,"hll":"00ff"}]`,
		want: Msg{Label: Count, SubID: "c1", Count: 238, Approximate: true}},
	{name: "COUNT strfry limited", frame: `["COUNT","c1",{"limited":true,"count":1000000}]`,
		want: Msg{Label: Count, SubID: "c1", Count: 1000000, Approximate: true}},
	{name: "COUNT approximate not a boolean", frame: `["COUNT","c1",{"count":5,"approximate":"yes"}]`,
		want: Msg{Label: Count, SubID: "c1", Count: 5, Approximate: true}},
	{name: "NEG-MSG", frame: `["NEG-MSG","n1","6100000200"]`, want: Msg{Label: NegMsg, SubID: "n1", Message: "6100000200"}},
	{name: "NEG-ERR with strfry limit", frame: `["NEG-ERR","n1","blocked: too many query results",1000000]`,
		want: Msg{Label: NegErr, SubID: "n1", Message: "blocked: too many query results"}},
	{name: "LIMITS", frame: `["LIMITS",{"max_limit":500}]`, want: Msg{Label: Unknown, Message: "LIMITS"}},
	{name: "lowercase label is unknown", frame: `["event","s",{}]`, want: Msg{Label: Unknown, Message: "event"}},
	{name: "label only", frame: `["PING"]`, want: Msg{Label: Unknown, Message: "PING"}},

	{name: "EOSE without sub", err: ErrMalformed, frame: `["EOSE"]`, want: Msg{Label: EOSE}},
	{name: "EOSE null sub", err: ErrMalformed, frame: `["EOSE",null]`, want: Msg{Label: EOSE}},
	{name: "NOTICE number", err: ErrMalformed, frame: `["NOTICE",5]`, want: Msg{Label: Notice}},
	{name: "OK bad id", err: ErrMalformed, frame: `["OK","xyz",true,""]`, want: Msg{Label: OK}},
	{name: "OK no bool", err: ErrMalformed, frame: `["OK","` + id1 + `"]`, want: Msg{Label: OK}},
	{name: "OK string bool", err: ErrMalformed, frame: `["OK","` + id1 + `","true"]`, want: Msg{Label: OK}},
	{name: "COUNT float", err: ErrMalformed, frame: `["COUNT","c",{"count":1.5}]`, want: Msg{Label: Count}},
	{name: "COUNT missing", err: ErrMalformed, frame: `["COUNT","c",{"n":1}]`, want: Msg{Label: Count}},
	{name: "COUNT duplicate", err: ErrMalformed, frame: `["COUNT","c",{"count":1,"count":2}]`, want: Msg{Label: Count}},
	{name: "NEG-MSG no message", err: ErrMalformed, frame: `["NEG-MSG","n1"]`, want: Msg{Label: NegMsg}},
	{name: "unknown label trailing garbage", err: ErrMalformed, frame: `["LIMITS",{}] x`, want: Msg{Label: Unknown}},
	{name: "NOTICE truncated", err: ErrMalformed, frame: `["NOTICE","abc`, want: Msg{Label: Notice}},

	{name: "empty", err: ErrMalformed, frame: ``},
	{name: "whitespace", err: ErrMalformed, frame: " \n"},
	{name: "object", err: ErrMalformed, frame: `{"EVENT":1}`},
	{name: "string", err: ErrMalformed, frame: `"EVENT"`},
	{name: "null", err: ErrMalformed, frame: `null`},
	{name: "empty array", err: ErrMalformed, frame: `[]`},
	{name: "numeric label", err: ErrMalformed, frame: `[1,"s"]`},
	{name: "null label", err: ErrMalformed, frame: `[null]`},
	{name: "truncated label", err: ErrMalformed, frame: `["EVE`},
	{name: "binary", err: ErrMalformed, frame: "\x00\xff["},
}

func TestParse(t *testing.T) {
	for _, tc := range append(append([]parseCase(nil), eventCases...), otherCases...) {
		t.Run(tc.name, func(t *testing.T) {
			frame := []byte(tc.frame)
			got, err := Parse(frame)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("Parse(%q) error = %v, want %v", tc.frame, err, tc.err)
			}
			if !msgEqual(got, tc.want) {
				t.Errorf("Parse(%q)\n got %+v\nwant %+v\n raw %q\nwant %q", tc.frame, got, tc.want, got.Raw, tc.want.Raw)
			}
			if !within(frame, got.Raw) || cap(got.Raw) != len(got.Raw) {
				t.Errorf("Raw is not a clipped sub-slice of the frame")
			}
			if _, fast := scanEvent(frame); fast != tc.fast {
				t.Errorf("scanner handled it: %v, want %v", fast, tc.fast)
			}
		})
	}
}

func msgEqual(a, b Msg) bool {
	return a.Label == b.Label && a.SubID == b.SubID && a.ID == b.ID && a.CreatedAt == b.CreatedAt &&
		a.Message == b.Message && a.Count == b.Count && a.Approximate == b.Approximate && a.Accepted == b.Accepted &&
		bytes.Equal(a.Raw, b.Raw) && (a.Raw == nil) == (b.Raw == nil)
}

func TestLabelString(t *testing.T) {
	for l, want := range map[Label]string{Event: "EVENT", NegErr: "NEG-ERR", Unknown: "unknown", Label(200): "unknown"} {
		if got := l.String(); got != want {
			t.Errorf("Label(%d).String() = %q, want %q", l, got, want)
		}
	}
	for text, l := range labels {
		if l.String() != text {
			t.Errorf("labels[%q] = %v", text, l)
		}
	}
}

// The hot path must not allocate once a subscription id is cached.
func TestParseEventAllocs(t *testing.T) {
	frame := []byte(`["EVENT","sub:1",` + canonical + `]`)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := Parse(frame); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Parse allocates %.1f times per EVENT frame, want 0", allocs)
	}
}

func TestInternReturnsEqualStrings(t *testing.T) {
	long := strings.Repeat("x", maxInternLen+1)
	for _, s := range []string{"a", "b", "a", "", long, long} {
		if got := intern([]byte(s)); got != s {
			t.Errorf("intern(%q) = %q", s, got)
		}
	}
}

// The first byte stringStops flags must be the first byte strPlain rejects.
func TestStringStops(t *testing.T) {
	check := func(w [8]byte) {
		want := 8
		for i, c := range w {
			if !strPlain[c] {
				want = i
				break
			}
		}
		got := bits.TrailingZeros64(stringStops(binary.LittleEndian.Uint64(w[:]))) / 8
		if got != want {
			t.Fatalf("stringStops(%q): first stop %d, want %d", w, got, want)
		}
	}
	for c := 0; c < 256; c++ {
		for p := range 8 {
			for _, fill := range []byte{'a', 0xff, 0x80, 0x20, 0x21, 0x5d} {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[p] = byte(c)
				check(w)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		check(w)
	}
}

// skipValueCases are single JSON values, valid and not, at the corners
// of the grammar.
var skipValueCases = []string{
	`0`, `-0`, `1`, `-1`, `10`, `1.5`, `-0.5e+3`, `12E-1`, `1e9`, `0.0`,
	`01`, `1.`, `.5`, `-`, `-.5`, `1e`, `1e+`, `+1`, `0x1`, `1.5e`, `--1`,
	`true`, `false`, `null`, `tru`, `nul`, `True`,
	`""`, `"a"`, `"\\"`, `"\""`, `"\/\b\f\n\r\t"`, `"\u00e9\uD83D\uDE00"`, `"é😀"`,
	`"\x"`, `"\u12"`, `"\u12g4"`, `"a`, "\"\x01\"", "\"\x7f\"", "\"\xff\"",
	`[]`, `[1,2]`, `[ 1 , [ ] ]`, `[1,]`, `[,1]`, `[1 2]`, `[`,
	`{}`, `{"a":1}`, `{"a":{"b":[]}}`, `{"a"}`, `{"a":}`, `{1:2}`, `{"a":1,}`, `{"a":1 "b":2}`, `{`,
}

func TestSkipValue(t *testing.T) {
	for _, v := range skipValueCases {
		end := skipValue([]byte(v), 0, 0)
		if valid := json.Valid([]byte(v)); (end == len(v)) != valid {
			t.Errorf("skipValue(%q) = %d, json.Valid = %v", v, end, valid)
		}
	}
}

// Parse shares the sub id cache between goroutines; more distinct ids than
// slots forces concurrent evictions.
func TestParseConcurrentSubIDs(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				sub := "sub:" + strconv.Itoa((i*7+g)%(3*internSlots))
				m, err := Parse([]byte(`["EVENT","` + sub + `",` + canonical + `]`))
				if err != nil || m.SubID != sub {
					errs <- fmt.Errorf("Parse: sub id %q, want %q, %v", m.SubID, sub, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Long strings, where the scanner steps 8 bytes at a time: a stop byte
// (or a byte at the edges of the stop classes) at every offset of the
// first 96, after every kind of plain byte, agrees with json.Valid.
func TestSkipLongString(t *testing.T) {
	plain := []byte{' ', 'a', '~', 0x7f, 0x80, 0xc3, 0xff, '!', '#', '[', ']'}
	edges := []byte{'"', '\\', 0x00, 0x1f, 0x20, 0x21, 0x5b, 0x5d, 0x22 ^ 0x80, 0x5c ^ 0x80, 0x9f}
	for _, p := range plain {
		for _, e := range edges {
			for at := range 96 {
				body := bytes.Repeat([]byte{p}, 100)
				body[at] = e
				v := append(append([]byte{'"'}, body...), '"', ' ', ' ')
				end := skipValue(v, 0, 0)
				if valid := json.Valid(v); (end == len(v)-2) != valid {
					t.Fatalf("%#x at %d in a string of %#x: skipValue = %d, json.Valid = %v", e, at, p, end, valid)
				}
			}
		}
	}
}
