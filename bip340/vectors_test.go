package bip340

import (
	"bytes"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
)

// vector is one row of the official BIP-340 test-vectors.csv.
type vector struct {
	index            int
	secKey, aux, msg []byte
	pubKey           [32]byte
	sig              [64]byte
	valid            bool
	comment          string
}

// wantErr is the sentinel each failing row must produce, by index; the
// rows are fixed by the BIP, so the reason is too.
var wantErr = map[int]error{
	5:  ErrBadPubKey,
	6:  ErrInvalidSignature,
	7:  ErrInvalidSignature,
	8:  ErrInvalidSignature,
	9:  ErrInvalidSignature,
	10: ErrInvalidSignature,
	11: ErrInvalidSignature,
	12: ErrMalformedSignature,
	13: ErrMalformedSignature,
	14: ErrBadPubKey,
}

// loadVectors reads testdata/test-vectors.csv, the official vectors of
// bitcoin/bips bip-0340/test-vectors.csv in their current form (rows 0-18;
// rows 15-18, added 2022-12, sign messages that are not 32 bytes long).
func loadVectors(t testing.TB) []vector {
	t.Helper()
	f, err := os.Open("testdata/test-vectors.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"index", "secret key", "public key", "aux_rand", "message", "signature", "verification result", "comment"}; !slices.Equal(rows[0], want) {
		t.Fatalf("header %q, want %q", rows[0], want)
	}
	var vs []vector
	for _, r := range rows[1:] {
		var v vector
		if v.index, err = strconv.Atoi(r[0]); err != nil {
			t.Fatal(err)
		}
		v.secKey, v.aux, v.msg = mustHex(t, r[1]), mustHex(t, r[3]), mustHex(t, r[4])
		copy(v.pubKey[:], mustHex(t, r[2]))
		copy(v.sig[:], mustHex(t, r[5]))
		v.valid = r[6] == "TRUE"
		v.comment = r[7]
		vs = append(vs, v)
	}
	return vs
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVectors(t *testing.T) {
	vs := loadVectors(t)
	if len(vs) != 19 {
		t.Fatalf("%d vectors, want 19 (rows 0-18)", len(vs))
	}
	cache := NewKeyCache(16)
	for _, v := range vs {
		t.Run(strconv.Itoa(v.index), func(t *testing.T) {
			for name, err := range map[string]error{
				"verify":       verify(&v.pubKey, v.msg, &v.sig),
				"cache (miss)": cache.verify(&v.pubKey, v.msg, &v.sig),
				"cache (hit)":  cache.verify(&v.pubKey, v.msg, &v.sig),
			} {
				if v.valid && err != nil {
					t.Errorf("%s: %v, want valid (%s)", name, err, v.comment)
				}
				if !v.valid && !errors.Is(err, wantErr[v.index]) {
					t.Errorf("%s: %v, want %v (%s)", name, err, wantErr[v.index], v.comment)
				}
			}
			if len(v.msg) == 32 {
				err := Verify(&v.pubKey, (*[32]byte)(v.msg), &v.sig)
				if (err == nil) != v.valid {
					t.Errorf("Verify: %v, want valid=%v", err, v.valid)
				}
			}
			if len(v.secKey) != 0 {
				checkSign(t, v)
			}
		})
	}
}

// checkSign checks the row's secret key against btcec: it yields the
// listed public key and, for 32-byte messages (all btcec signs), a
// signature that verifies and, with the row's aux_rand, equals the listed
// one.
func checkSign(t *testing.T, v vector) {
	priv, _ := btcec.PrivKeyFromBytes(v.secKey)
	if got := schnorr.SerializePubKey(priv.PubKey()); !bytes.Equal(got, v.pubKey[:]) {
		t.Fatalf("secret key gives pubkey %x, want %x", got, v.pubKey)
	}
	if len(v.msg) != 32 {
		return
	}
	for _, opts := range [][]schnorr.SignOption{nil, {schnorr.CustomNonce([32]byte(v.aux))}} {
		s, err := schnorr.Sign(priv, v.msg, opts...)
		if err != nil {
			t.Fatal(err)
		}
		sig := [64]byte(s.Serialize())
		if err := Verify(&v.pubKey, (*[32]byte)(v.msg), &sig); err != nil {
			t.Errorf("btcec signature %x: %v", sig, err)
		}
		if opts != nil && sig != v.sig {
			t.Errorf("btcec signature with aux_rand %x, want %x", sig, v.sig)
		}
	}
}
