package event

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
)

func TestAppendStringEscapes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", `"plain"`},
		{"a\"b\\c", `"a\"b\\c"`},
		{"\n\r\t\b\f", `"\n\r\t\b\f"`},
		{"\x00\x01\x1f", `"\u0000\u0001\u001f"`},
		{"</script> é 😀", `"</script> é 😀"`},
		{"\x7f", "\"\x7f\""},
	} {
		if got := string(AppendString(nil, tc.in)); got != tc.want {
			t.Errorf("AppendString(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestSignParseRoundTrip(t *testing.T) {
	sk, _ := btcec.NewPrivateKey()
	e := &Event{CreatedAt: 1700000000, Kind: 1, Tags: [][]string{{"p", "x"}, {"e"}}, Content: "hi \"there\"\n</>é"}
	if err := e.Sign(sk); err != nil {
		t.Fatal(err)
	}
	raw := AppendJSON(nil, e)
	got, err := Parse(raw)
	if err != nil {
		t.Fatalf("Parse(%s): %v", raw, err)
	}
	if id, _ := got.ComputeID(nil); id != e.ID {
		t.Fatalf("id mismatch after round trip")
	}
	if !bytes.Equal(AppendJSON(nil, got), raw) {
		t.Fatalf("re-serialization differs:\n%s\n%s", AppendJSON(nil, got), raw)
	}
	sig, err := schnorr.ParseSignature(got.Sig[:])
	if err != nil {
		t.Fatal(err)
	}
	pk, err := schnorr.ParsePubKey(got.PubKey[:])
	if err != nil {
		t.Fatal(err)
	}
	if !sig.Verify(got.ID[:], pk) {
		t.Fatal("signature does not verify")
	}
}

// A relay may send other key orders, whitespace and escapes; the id is
// over the canonical form, so all of these must decode to the same event.
func TestParseNonCanonicalForms(t *testing.T) {
	sk, _ := btcec.NewPrivateKey()
	e := &Event{CreatedAt: 1700000001, Kind: 7, Tags: [][]string{{"t", "a/b"}}, Content: "é</"}
	if err := e.Sign(sk); err != nil {
		t.Fatal(err)
	}
	id := hex.EncodeToString(e.ID[:])
	pk := hex.EncodeToString(e.PubKey[:])
	sig := hex.EncodeToString(e.Sig[:])
	forms := []string{
		`{"id":"` + id + `","pubkey":"` + pk + `","created_at":1700000001,"kind":7,"tags":[["t","a/b"]],"content":"é</","sig":"` + sig + `"}`,
		`{ "sig" : "` + sig + `" , "content":"\u00e9\u003c\/", "kind":7,"tags":[ [ "t" , "a\/b" ] ],"created_at":1700000001,"pubkey":"` + pk + `","id":"` + id + `" }`,
		"{\n\t\"content\":\"\\u00E9<\\/\",\"id\":\"" + id + "\",\"extra\":{\"id\":\"x\"},\"pubkey\":\"" + pk + "\",\"created_at\":1700000001,\"kind\":7,\"tags\":[[\"t\",\"a/b\"]],\"sig\":\"" + sig + "\"}\n",
	}
	for i, f := range forms {
		got, err := Parse([]byte(f))
		if err != nil {
			t.Fatalf("form %d: %v", i, err)
		}
		if cid, _ := got.ComputeID(nil); cid != e.ID {
			t.Errorf("form %d: recomputed id differs", i)
		}
	}
}

func TestParseRejects(t *testing.T) {
	sk, _ := btcec.NewPrivateKey()
	e := &Event{CreatedAt: 5, Kind: 1, Tags: [][]string{}, Content: "x"}
	_ = e.Sign(sk)
	good := string(AppendJSON(nil, e))
	id := hex.EncodeToString(e.ID[:])
	for name, in := range map[string]string{
		"not object":     `[1,2]`,
		"truncated":      good[:len(good)-3],
		"trailing":       good + `{}`,
		"duplicate id":   `{"id":"` + id + `",` + good[1:],
		"missing sig":    `{"id":"` + id + `","pubkey":"` + id + `","created_at":1,"kind":1,"tags":[],"content":""}`,
		"upper hex":      `{"id":"` + string(bytes.ToUpper([]byte(id))) + good[71:],
		"float time":     `{"created_at":1.5,` + good[1:],
		"null content":   `{"content":null,` + good[1:],
		"tag not string": `{"tags":[[1]],` + good[1:],
		"bad utf8":       "{\"content\":\"\xff\"," + good[1:],
		"kind too big":   `{"kind":70000,` + good[1:],
	} {
		if _, err := Parse([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
}
