package bip340

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	secp "github.com/decred/dcrd/dcrec/secp256k1/v4"
)

// ErrBadSecretKey: a secret key that is not in [1, n-1].
var ErrBadSecretKey = errors.New("bip340: secret key out of range")

// PrivateKey is a BIP-340 signing key: a NIP-42 AUTH key, the only secret
// the archiver holds. Every way of printing it (String, %v, %x, %#v,
// JSON) shows only its public key, so a key that reaches a log line or a
// status document by mistake is not disclosed.
type PrivateKey struct {
	d   secp.ModNScalar
	pub [32]byte
}

// NewPrivateKey returns the key whose secret is the 32-byte big-endian
// integer b, which must be in [1, n-1].
func NewPrivateKey(b []byte) (*PrivateKey, error) {
	if len(b) != 32 {
		return nil, fmt.Errorf("%w: %d bytes, want 32", ErrBadSecretKey, len(b))
	}
	k := &PrivateKey{}
	if overflow := k.d.SetByteSlice(b); overflow || k.d.IsZero() {
		k.d.Zero()
		return nil, ErrBadSecretKey
	}
	var p secp.JacobianPoint
	secp.ScalarBaseMultNonConst(&k.d, &p)
	p.ToAffine()
	p.X.PutBytes(&k.pub)
	return k, nil
}

// PublicKey returns the x-only public key.
func (k *PrivateKey) PublicKey() [32]byte { return k.pub }

// Sign signs a Nostr event id with fresh auxiliary randomness.
func (k *PrivateKey) Sign(msg *[32]byte) ([64]byte, error) {
	var aux [32]byte
	if _, err := io.ReadFull(rand.Reader, aux[:]); err != nil {
		return [64]byte{}, fmt.Errorf("bip340: aux randomness: %w", err)
	}
	return k.sign(msg[:], &aux)
}

// sign is BIP-340's Sign(sk, m, a) for a message of any length, step by
// step as the BIP writes it; the signature is verified before it is
// returned, as the BIP recommends (a fault must not leak the key).
func (k *PrivateKey) sign(msg []byte, aux *[32]byte) ([64]byte, error) {
	var sig [64]byte
	// d = d' if P has an even y, else n - d'.
	var p secp.JacobianPoint
	secp.ScalarBaseMultNonConst(&k.d, &p)
	p.ToAffine()
	d := k.d
	if p.Y.IsOdd() {
		d.Negate()
	}
	// t = bytes(d) xor tagged_hash("BIP0340/aux", a)
	db := d.Bytes()
	ah := taggedHash("BIP0340/aux", aux[:])
	var t [32]byte
	for i := range t {
		t[i] = db[i] ^ ah[i]
	}
	// k' = int(tagged_hash("BIP0340/nonce", t || bytes(P) || m)) mod n
	nonce := taggedHash("BIP0340/nonce", t[:], k.pub[:], msg)
	var kn secp.ModNScalar
	kn.SetBytes(&nonce)
	if kn.IsZero() {
		return sig, errors.New("bip340: nonce is zero")
	}
	var r secp.JacobianPoint
	secp.ScalarBaseMultNonConst(&kn, &r)
	r.ToAffine()
	if r.Y.IsOdd() {
		kn.Negate()
	}
	var rx [32]byte
	r.X.PutBytes(&rx)
	// e = int(tagged_hash("BIP0340/challenge", bytes(R) || bytes(P) || m)) mod n
	eh := challenge(rx[:], &k.pub, msg)
	var e secp.ModNScalar
	e.SetBytes(&eh)
	// s = (k + e*d) mod n
	s := new(secp.ModNScalar).Mul2(&e, &d).Add(&kn)
	copy(sig[:32], rx[:])
	s.PutBytesUnchecked(sig[32:])
	d.Zero()
	kn.Zero()
	if err := verify(&k.pub, msg, &sig); err != nil {
		return [64]byte{}, fmt.Errorf("bip340: own signature does not verify: %w", err)
	}
	return sig, nil
}

// taggedHash is SHA-256(SHA-256(tag) || SHA-256(tag) || parts...).
func taggedHash(tag string, parts ...[]byte) [32]byte {
	th := sha256.Sum256([]byte(tag))
	h := sha256.New()
	h.Write(th[:])
	h.Write(th[:])
	for _, p := range parts {
		h.Write(p)
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// redacted is how a PrivateKey prints: its public key only.
// Value receivers: a PrivateKey printed by value redacts as well.
func (k PrivateKey) redacted() string {
	return "bip340.PrivateKey(redacted; pubkey " + hex.EncodeToString(k.pub[:]) + ")"
}

// String implements fmt.Stringer without the secret.
func (k PrivateKey) String() string { return k.redacted() }

// GoString implements fmt.GoStringer (%#v) without the secret.
func (k PrivateKey) GoString() string { return k.redacted() }

// Format implements fmt.Formatter: every verb (%x included) prints the
// redacted form.
func (k PrivateKey) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, k.redacted()) }

// MarshalJSON writes the redacted form as a JSON string.
func (k PrivateKey) MarshalJSON() ([]byte, error) { return []byte(`"` + k.redacted() + `"`), nil }

// MarshalText writes the redacted form (YAML, TOML, zap's reflection).
func (k PrivateKey) MarshalText() ([]byte, error) { return []byte(k.redacted()), nil }
