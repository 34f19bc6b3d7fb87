package event

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/btcsuite/btcd/btcec/v2"
)

// parseCase is one input with the expected outcome; the input's fields
// come from a fixed signed event (see parseCases).
type parseCase struct {
	name string
	in   string
	ok   bool
}

// parseCases covers the serializations a relay may send and the edges
// of the replaced decoder's semantics. The same inputs seed FuzzParse.
func parseCases(tb testing.TB) []parseCase {
	sk, _ := btcec.PrivKeyFromBytes(bytes.Repeat([]byte{7}, 32))
	e := &Event{CreatedAt: 1700000000, Kind: 1, Tags: [][]string{{"p", "x"}, {"e"}}, Content: "hi \"there\"\n</>é"}
	if err := e.Sign(sk); err != nil {
		tb.Fatal(err)
	}
	id := hex.EncodeToString(e.ID[:])
	pk := hex.EncodeToString(e.PubKey[:])
	sig := hex.EncodeToString(e.Sig[:])
	// obj builds an event object with the given (raw JSON) tags, content
	// and extra members; the hex fields come first.
	obj := func(createdAt, kind, tags, content string, extra ...string) string {
		s := `{"id":"` + id + `","pubkey":"` + pk + `","created_at":` + createdAt + `,"kind":` + kind +
			`,"tags":` + tags + `,"content":` + content + `,"sig":"` + sig + `"`
		for _, x := range extra {
			s += "," + x
		}
		return s + "}"
	}
	good := obj("1", "1", `[]`, `"x"`)
	return []parseCase{
		{"canonical", string(AppendJSON(nil, e)), true},
		{"reversed keys, all whitespace", " \t\r\n{ \"sig\" :\r\n\"" + sig + "\"\t,\"content\" : \"x\" ,\n\"tags\" : [ [ \"a\" , \"b\" ] , [ ] ] ,\"kind\":1,\"created_at\":2,\"pubkey\":\"" + pk + "\",\"id\":\"" + id + "\" }\n\t ", true},
		{"escapes", obj("1", "1", `[["t","a\/b","\u00e9\u003c"]]`, `"a\/b \u00e9\u003C \n\t\"\\ \b\f\r \u0000 \u001f"`), true},
		{"surrogate pair", obj("1", "1", `[["\uD83D\uDE00"]]`, `"\ud83d\ude00 \udbff\udfff"`), true},
		{"unpaired surrogates", obj("1", "1", `[["\ud800","\udc00"]]`, `"\ud800x \udc00\ud800 \ud800\ud800\udc00 \ud800\\u1234 \ud800\u0041 \ud800"`), true},
		{"raw non-ASCII", obj("1", "1", `[["日本語","😀"]]`, `"日本語 😀 \u2028"`), true},
		{"escaped keys", strings.Replace(strings.Replace(good, `"id"`, `"\u0069d"`, 1), `"content"`, `"c\u006Fntent"`, 1), true},
		{"escaped hex", strings.Replace(good, `"id":"`+id[:1], `"id":"\u00`+hex.EncodeToString([]byte(id[:1])), 1), true},
		{"unknown keys", obj("1", "1", `[]`, `"x"`, `"extra":{"a":[1,-2.5e+3,0,-0.0e-0,1E9,true,false,null,{"id":"x","":{}}],"b":[]}`, `"z":"s\u0000"`, `"n":null`, `"deep":[[[[{}]]]]`, `"extra":7`), true},
		{"id lookalike in content", obj("1", "1", `[["id","`+id+`"]]`, `"{\"id\":\"`+id+`\",\"kind\":9}"`), true},
		{"created_at -0", obj("-0", "0", `[]`, `""`), true},
		{"limits", obj("9007199254740992", "65535", `[[],[""]]`, `""`), true},
		{"empty tag lists", obj("1", "1", `[[]]`, `""`), true},

		{"empty", "", false},
		{"space", " ", false},
		{"empty object", "{}", false},
		{"array", "[]", false},
		{"null", "null", false},
		{"BOM", "\ufeff" + good, false},
		{"missing sig", strings.Replace(good, `,"sig":"`+sig+`"`, "", 1), false},
		{"truncated", good[:len(good)-1], false},
		{"trailing }", good + "}", false},
		{"trailing x", good + " x", false},
		{"trailing ,", good + ",", false},
		{"trailing string", good + `"a`, false},
		{"trailing object", good + "{}", false},
		{"trailing comma in object", good[:len(good)-1] + ",}", false},
		{"missing comma", strings.Replace(good, `,"kind"`, ` "kind"`, 1), false},
		{"missing colon", strings.Replace(good, `"kind":`, `"kind" `, 1), false},
		{"tags null", obj("1", "1", `null`, `"x"`), false},
		{"tag null", obj("1", "1", `[null]`, `"x"`), false},
		{"item null", obj("1", "1", `[[null]]`, `"x"`), false},
		{"item number", obj("1", "1", `[["a",1]]`, `"x"`), false},
		{"tags object", obj("1", "1", `{}`, `"x"`), false},
		{"tags trailing comma", obj("1", "1", `[["a",]]`, `"x"`), false},
		{"content null", obj("1", "1", `[]`, `null`), false},
		{"content number", obj("1", "1", `[]`, `1`), false},
		{"created_at 2^53+1", obj("9007199254740993", "1", `[]`, `"x"`), false},
		{"created_at huge", obj("99999999999999999999999", "1", `[]`, `"x"`), false},
		{"created_at float", obj("1.0", "1", `[]`, `"x"`), false},
		{"created_at exponent", obj("1e3", "1", `[]`, `"x"`), false},
		{"created_at leading zero", obj("01", "1", `[]`, `"x"`), false},
		{"created_at -00", obj("-00", "1", `[]`, `"x"`), false},
		{"created_at negative", obj("-1", "1", `[]`, `"x"`), false},
		{"created_at string", obj(`"1"`, "1", `[]`, `"x"`), false},
		{"kind 65536", obj("1", "65536", `[]`, `"x"`), false},
		{"duplicate via escape", obj("1", "1", `[]`, `"x"`, `"\u0069d":"`+id+`"`), false},
		{"duplicate content", obj("1", "1", `[]`, `"x"`, `"content":"x"`), false},
		{"upper hex", strings.Replace(good, id, strings.ToUpper(id), 1), false},
		{"short hex", strings.Replace(good, id, id[:62], 1), false},
		{"id null", strings.Replace(good, `"`+id+`"`, "null", 1), false},
		{"invalid escape", obj("1", "1", `[]`, `"\x"`), false},
		{"quote escape", obj("1", "1", `[]`, `"\'"`), false},
		{"bad \\u", obj("1", "1", `[]`, `"\u12g4"`), false},
		{"short \\u", obj("1", "1", `[]`, `"\u12"`), false},
		{"control character", obj("1", "1", `[]`, "\"\x01\""), false},
		{"invalid UTF-8", obj("1", "1", `[]`, `"x"`, "\"u\":\"\xff\""), false},
		{"unknown 1.", obj("1", "1", `[]`, `"x"`, `"u":1.`), false},
		{"unknown -", obj("1", "1", `[]`, `"x"`, `"u":-`), false},
		{"unknown 01", obj("1", "1", `[]`, `"x"`, `"u":[01]`), false},
		{"unknown 1e", obj("1", "1", `[]`, `"x"`, `"u":1e+`), false},
		{"unknown tru", obj("1", "1", `[]`, `"x"`, `"u":tru`), false},
		{"unknown truex", obj("1", "1", `[]`, `"x"`, `"u":truex`), false},
		{"unknown [1,]", obj("1", "1", `[]`, `"x"`, `"u":[1,]`), false},
		{"unknown {\"a\"}", obj("1", "1", `[]`, `"x"`, `"u":{"a"}`), false},
		{"unknown {\"a\":1,}", obj("1", "1", `[]`, `"x"`, `"u":{"a":1,}`), false},
		{"unknown mismatched", obj("1", "1", `[]`, `"x"`, `"u":[}`), false},
		{"unknown missing value", obj("1", "1", `[]`, `"x"`, `"u":`), false},
		{"unknown bare word", obj("1", "1", `[]`, `"x"`, `"u":x`), false},
		{"non-string key", strings.Replace(good, `"kind"`, `kind`, 1), false},
	}
}

func TestParseCases(t *testing.T) {
	for _, tc := range parseCases(t) {
		got, err := Parse([]byte(tc.in))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
			continue
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", tc.name, err)
		}
		checkAgainstReference(t, []byte(tc.in), got, err)
	}
}

func TestParseDecodesLikeEncodingJSON(t *testing.T) {
	for _, tc := range parseCases(t) {
		if tc.name != "unpaired surrogates" {
			continue
		}
		e, err := Parse([]byte(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		want := "\ufffdx \ufffd\ufffd \ufffd\U00010000 \ufffd\\u1234 \ufffdA \ufffd"
		if e.Content != want || e.Tags[0][0] != "\ufffd" || e.Tags[0][1] != "\ufffd" {
			t.Errorf("content %+q tags %+q, want %+q and U+FFFD", e.Content, e.Tags, want)
		}
	}
}

// The replaced decoder read an unknown key's value with encoding/json's
// nesting limit of 10000; keep the same boundary.
func TestParseUnknownValueDepth(t *testing.T) {
	good := parseCases(t)[0].in
	for _, depth := range []int{maxDepth, maxDepth + 1} {
		in := []byte(good[:len(good)-1] + `,"u":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + "}")
		_, err := Parse(in)
		if ok := depth <= maxDepth; (err == nil) != ok {
			t.Errorf("depth %d: err = %v, want ok=%v", depth, err, ok)
		}
		checkAgainstReference(t, in, nil, err)
	}
}

// Parse returns fresh slices: appending to one tag must not clobber the
// next, though they share a backing array.
func TestParseTagsIndependent(t *testing.T) {
	e, err := Parse([]byte(parseCases(t)[0].in))
	if err != nil {
		t.Fatal(err)
	}
	_ = append(e.Tags[0], "clobber")
	if e.Tags[1][0] != "e" {
		t.Fatalf("tag 1 = %q after appending to tag 0", e.Tags[1])
	}
}

// checkAgainstReference fails unless parseReference agrees with the
// outcome (got, err) of Parse on in. A nil got skips the value check.
func checkAgainstReference(t *testing.T, in []byte, got *Event, err error) {
	t.Helper()
	want, werr := parseReference(in)
	if (err == nil) != (werr == nil) {
		t.Fatalf("Parse err = %v, reference err = %v on %.400q", err, werr, in)
	}
	if err == nil && got != nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse = %+v\nreference = %+v\non %.400q", got, want, in)
	}
}

func FuzzParse(f *testing.F) {
	for _, tc := range parseCases(f) {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := Parse(in)
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("err = %v, want ErrMalformed", err)
		}
		checkAgainstReference(t, in, got, err)
		if err != nil {
			return
		}
		// What Parse accepts, AppendJSON writes back in a form Parse reads
		// to the same event.
		again, err := Parse(AppendJSON(nil, got))
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("re-parse of AppendJSON: %v\n%+v\n%+v", err, again, got)
		}
	})
}

// FuzzParseFields splices fuzz bytes into one slot of a valid event, so
// that most inputs are accepted and the decoded strings and numbers (not
// just accept/reject) are compared with the reference.
func FuzzParseFields(f *testing.F) {
	good := parseCases(f)[0].in
	const slots = 6
	for _, frag := range []string{
		`a\/b \u00e9\u003c`, `\ud83d\ude00`, `\ud800\ud800\udc00`, `\udc00x`, `\ud800\\u0041`,
		`\"\\\b\f\n\r\t`, `日本語 😀`, `\u0069d`, `{"a":[1,-2.5e+3,true,null]}`, `-0`, `9007199254740992`,
		`[["a","\u0000"],[]]`,
	} {
		for slot := range slots {
			f.Add(uint8(slot), frag)
		}
	}
	f.Fuzz(func(t *testing.T, slot uint8, frag string) {
		var in string
		switch slot % slots {
		case 0: // content body
			in = strings.Replace(good, `"content":"`, `"content":"`+frag, 1)
		case 1: // tag item body
			in = strings.Replace(good, `"tags":[["p","`, `"tags":[["p","`+frag, 1)
		case 2: // unknown key, or a known one spelled with escapes
			in = good[:len(good)-1] + `,"` + frag + `":[]}`
		case 3: // unknown key's value
			in = good[:len(good)-1] + `,"u":` + frag + `}`
		case 4: // created_at
			in = strings.Replace(good, `"created_at":1700000000`, `"created_at":`+frag, 1)
		case 5: // tags
			in = strings.Replace(good, `"tags":[["p","x"],["e"]]`, `"tags":`+frag, 1)
		}
		got, err := Parse([]byte(in))
		checkAgainstReference(t, []byte(in), got, err)
	})
}
