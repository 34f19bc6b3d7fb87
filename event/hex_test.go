package event

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
)

// Every byte value in every place: lowercase hex decodes as encoding/hex
// does, and any other byte is refused, naming the offset of its pair.
func TestDecodeLowerHex(t *testing.T) {
	valid := "00112233445566778899aabbccddeeff0123456789abcdeffedcba9876543210"
	var want [32]byte
	if _, err := hex.Decode(want[:], []byte(valid)); err != nil {
		t.Fatal(err)
	}
	var got [32]byte
	if err := DecodeHex32(&got, []byte(valid)); err != nil || got != want {
		t.Fatalf("DecodeHex32(%s) = %x, %v", valid, got, err)
	}
	for pos := range len(valid) {
		for n := range 256 {
			c := byte(n)
			s := []byte(valid)
			s[pos] = c
			err := DecodeHex32(&got, s)
			isHex := strings.IndexByte("0123456789abcdef", c) >= 0
			switch {
			case isHex && err != nil:
				t.Fatalf("byte %q at %d: %v", c, pos, err)
			case isHex:
				var w [32]byte
				hex.Decode(w[:], s)
				if got != w {
					t.Fatalf("byte %q at %d: %x, want %x", c, pos, got, w)
				}
			case err == nil:
				t.Fatalf("byte %q at %d accepted", c, pos)
			case !strings.Contains(err.Error(), "offset "+strconv.Itoa(pos&^1)):
				t.Fatalf("byte %q at %d: %v; want offset %d", c, pos, err, pos&^1)
			}
		}
	}
	if err := DecodeHex32(&got, []byte(valid[:62])); err == nil {
		t.Error("62 characters accepted")
	}
}

// Random ids, as a relay sends them: one id over and over trains the
// branch predictor.
func BenchmarkDecodeHex32(b *testing.B) {
	ids := make([][]byte, 4096)
	for i := range ids {
		h := sha256.Sum256([]byte{byte(i), byte(i >> 8)})
		ids[i] = []byte(hex.EncodeToString(h[:]))
	}
	var id [32]byte
	i := 0
	for b.Loop() {
		if DecodeHex32(&id, ids[i%len(ids)]) != nil {
			b.Fatal("refused")
		}
		i++
	}
}
