package bip340

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
)

// TestSignVectors signs every official vector that has a secret key
// (rows 0-3 and 15-18) with its aux_rand: the public key and the
// signature must be exactly the listed ones, whatever the message length.
func TestSignVectors(t *testing.T) {
	n := 0
	for _, v := range loadVectors(t) {
		if len(v.secKey) == 0 {
			continue
		}
		n++
		t.Run(strconv.Itoa(v.index), func(t *testing.T) {
			k, err := NewPrivateKey(v.secKey)
			if err != nil {
				t.Fatal(err)
			}
			if k.PublicKey() != v.pubKey {
				t.Fatalf("pubkey %x, want %x", k.PublicKey(), v.pubKey)
			}
			sig, err := k.sign(v.msg, (*[32]byte)(v.aux))
			if err != nil {
				t.Fatal(err)
			}
			if sig != v.sig {
				t.Fatalf("signature %X, want %X (%s)", sig, v.sig, v.comment)
			}
		})
	}
	if n != 8 {
		t.Fatalf("%d signing vectors, want 8 (rows 0-3, 15-18)", n)
	}
}

// TestSignRoundTrip signs with fresh randomness for many keys and
// messages: each signature verifies with Verify and with btcec, differs
// from the last one for the same message (aux randomness is used), and
// fails once a bit of the message is flipped.
func TestSignRoundTrip(t *testing.T) {
	for i := range iterations(64, 16) {
		seed := sha256.Sum256([]byte("sign round trip " + strconv.Itoa(i)))
		k, err := NewPrivateKey(seed[:])
		if err != nil {
			t.Fatal(err)
		}
		msg := sha256.Sum256(seed[:])
		pub := k.PublicKey()
		sig1, err := k.Sign(&msg)
		if err != nil {
			t.Fatal(err)
		}
		sig2, err := k.Sign(&msg)
		if err != nil {
			t.Fatal(err)
		}
		if sig1 == sig2 {
			t.Fatalf("key %d: two signatures of one message are equal: aux randomness unused", i)
		}
		for _, sig := range [][64]byte{sig1, sig2} {
			if err := Verify(&pub, &msg, &sig); err != nil {
				t.Fatalf("key %d: own signature: %v", i, err)
			}
			bpk, err := schnorr.ParsePubKey(pub[:])
			if err != nil {
				t.Fatal(err)
			}
			bs, err := schnorr.ParseSignature(sig[:])
			if err != nil || !bs.Verify(msg[:], bpk) {
				t.Fatalf("key %d: btcec rejects the signature (%v)", i, err)
			}
			bad := msg
			bad[i%32] ^= 1 << (i % 8)
			if err := Verify(&pub, &bad, &sig); !errors.Is(err, ErrInvalidSignature) {
				t.Fatalf("key %d: signature verifies a changed message: %v", i, err)
			}
		}
		// Same public key as btcec derives.
		_, bpub := btcec.PrivKeyFromBytes(seed[:])
		if got := schnorr.SerializePubKey(bpub); !bytes.Equal(got, pub[:]) {
			t.Fatalf("key %d: pubkey %x, btcec %x", i, pub, got)
		}
	}
}

func TestNewPrivateKeyRange(t *testing.T) {
	n := curveOrder
	nMinus1 := curveOrder
	nMinus1[31]--
	for _, tc := range []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"zero", make([]byte, 32), false},
		{"n", n[:], false},
		{"all ones", bytes.Repeat([]byte{0xff}, 32), false},
		{"short", make([]byte, 31), false},
		{"one", append(make([]byte, 31), 1), true},
		{"n-1", nMinus1[:], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewPrivateKey(tc.b)
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrBadSecretKey) {
				t.Fatalf("err %v does not wrap ErrBadSecretKey", err)
			}
		})
	}
}

// TestPrivateKeyRedacted prints a key every way a log line or a status
// document might: the secret never appears, in hex of either case, and
// the public key does (it names which key is in use).
func TestPrivateKeyRedacted(t *testing.T) {
	secret := "b7e151628aed2a6abf7158809cf4f3c762e7160f38b4da56a784d9045190cfef"
	b, _ := hex.DecodeString(secret)
	k, err := NewPrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	pub := k.PublicKey()
	js, _ := json.Marshal(k)
	jsv, _ := json.Marshal(struct{ Key PrivateKey }{*k})
	txt, _ := k.MarshalText()
	outs := map[string]string{
		"%v": fmt.Sprintf("%v", k), "%+v": fmt.Sprintf("%+v", k), "%#v": fmt.Sprintf("%#v", k),
		"%s": fmt.Sprintf("%s", k), "%x": fmt.Sprintf("%x", k), "%X": fmt.Sprintf("%X", k),
		"value %v": fmt.Sprintf("%v", *k), "value %#v": fmt.Sprintf("%#v", *k), "value %x": fmt.Sprintf("%x", *k),
		"in struct %+v": fmt.Sprintf("%+v", struct{ K *PrivateKey }{k}),
		"json":          string(js), "json value": string(jsv), "text": string(txt), "String": k.String(),
	}
	for name, out := range outs {
		if strings.Contains(strings.ToLower(out), secret) {
			t.Errorf("%s shows the secret: %s", name, out)
		}
		if name != "in struct %+v" && !strings.Contains(out, hex.EncodeToString(pub[:])) {
			t.Errorf("%s does not name the public key: %s", name, out)
		}
	}
}
