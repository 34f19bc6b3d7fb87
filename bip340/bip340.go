// Package bip340 verifies BIP-340 Schnorr signatures over secp256k1: the
// signatures of Nostr events, whose message is the 32-byte event id and
// whose key is the 32-byte x-only author pubkey.
//
// Verify checks one signature; a KeyCache, shared by all workers, keeps
// parsed keys so that repeat authors skip the key lifting. VerifyBatch
// (and KeyCache.VerifyBatch) gives the same verdicts for many signatures
// at once, about 1.6x faster per signature when nearly all are valid.
// Errors wrap one of three sentinels (bad key, malformed signature,
// signature that does not verify) so that callers can record why an
// event was rejected.
//
// Verification is the archiver's CPU bottleneck, so the default, pure-Go
// backend does not use btcec's schnorr.Verify (two separate scalar
// multiplications on decred's 10x26-bit field, ~150 µs). It computes
// R = s·G - e·P as one Strauss multi-scalar multiplication sharing ~129
// doublings: e·P split by the GLV endomorphism into two 128-bit halves
// against a per-key table of odd multiples of P (the part a KeyCache
// keeps), s split into 128-bit halves against static tables of G and
// 2^128·G, all digits in width-w NAF, on a 4x64-bit field with
// safegcd inversion. Built with -tags libsecp256k1 (needs cgo and
// libsecp256k1 >= 0.2.0), it calls Bitcoin Core's C library instead.
// Backend names the one compiled in. Both pass the official BIP-340 test
// vectors and are checked against btcec/v2/schnorr by differential and
// fuzz tests.
//
// Verification is variable time; it only ever handles public data.
package bip340

import (
	"crypto/sha256"
	"errors"
	"fmt"
)

// Verdict sentinels. Every error returned by Verify wraps exactly one of
// them; the archive records which.
var (
	// ErrBadPubKey: the key is not an x coordinate of a curve point
	// (x >= p, or x^3 + 7 is not a square).
	ErrBadPubKey = errors.New("bip340: bad public key")
	// ErrMalformedSignature: r >= p or s >= n, rejected before any curve
	// arithmetic.
	ErrMalformedSignature = errors.New("bip340: malformed signature")
	// ErrInvalidSignature: well-formed key and signature that do not verify.
	ErrInvalidSignature = errors.New("bip340: invalid signature")
)

// Wrapped variants carry the exact reason without allocating per call.
var (
	errPubKeyRange      = fmt.Errorf("%w: x >= p", ErrBadPubKey)
	errPubKeyNotOnCurve = fmt.Errorf("%w: not on the curve", ErrBadPubKey)
	errSigR             = fmt.Errorf("%w: r >= p", ErrMalformedSignature)
	errSigS             = fmt.Errorf("%w: s >= n", ErrMalformedSignature)
)

// Verify reports whether sig is a valid BIP-340 signature of msg by the
// x-only public key pubkey: nil if valid, otherwise an error wrapping
// ErrBadPubKey, ErrMalformedSignature or ErrInvalidSignature (checked in
// that order, as in the BIP). It lifts the key on every call; use a
// KeyCache when authors repeat.
func Verify(pubkey *[32]byte, msg *[32]byte, sig *[64]byte) error {
	return verify(pubkey, msg[:], sig)
}

// Backend names the implementation compiled in: "go" (default) or
// "libsecp256k1" (build tag libsecp256k1).
func Backend() string { return backend }

// verify is Verify for messages of any length (BIP-340 allows them; the
// official vectors include some; Nostr uses 32 bytes).
func verify(pubkey *[32]byte, msg []byte, sig *[64]byte) error {
	var pk pubKey
	if err := parsePubKey(&pk, pubkey); err != nil {
		return err
	}
	return verifyParsed(&pk, pubkey, msg, sig)
}

// curveOrder is n, big-endian.
var curveOrder = [32]byte{
	0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe,
	0xba, 0xae, 0xdc, 0xe6, 0xaf, 0x48, 0xa0, 0x3b, 0xbf, 0xd2, 0x5e, 0x8c, 0xd0, 0x36, 0x41, 0x41,
}

// fieldPrime is p, big-endian.
var fieldPrime = [32]byte{
	0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 0xff, 0xff, 0xfc, 0x2f,
}

// checkSigRange rejects r >= p and s >= n, which BIP-340 requires and
// which the backends do not all report distinctly.
func checkSigRange(sig *[64]byte) error {
	if !lessBE(sig[:32], fieldPrime[:]) {
		return errSigR
	}
	if !lessBE(sig[32:], curveOrder[:]) {
		return errSigS
	}
	return nil
}

// lessBE reports a < b for equal-length big-endian integers.
func lessBE(a, b []byte) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// challengeTag is SHA-256("BIP0340/challenge"), twice, the tagged-hash
// prefix of the challenge e.
var challengeTag = func() [64]byte {
	h := sha256.Sum256([]byte("BIP0340/challenge"))
	var t [64]byte
	copy(t[:32], h[:])
	copy(t[32:], h[:])
	return t
}()

// challenge returns tagged_hash("BIP0340/challenge", r || P || msg).
func challenge(r []byte, pubkey *[32]byte, msg []byte) [32]byte {
	// One stack buffer and Sum256 keep the 32-byte message case free of
	// allocations.
	buf := make([]byte, 0, 64+32+32+32)
	buf = append(buf, challengeTag[:]...)
	buf = append(buf, r...)
	buf = append(buf, pubkey[:]...)
	buf = append(buf, msg...)
	return sha256.Sum256(buf)
}
