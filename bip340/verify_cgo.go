//go:build libsecp256k1

package bip340

// This backend calls Bitcoin Core's libsecp256k1 (0.2.0 or later, built
// with the extrakeys and schnorrsig modules, as Debian's libsecp256k1-dev
// is). It needs cgo.

/*
#cgo LDFLAGS: -lsecp256k1
#include <secp256k1.h>
#include <secp256k1_extrakeys.h>
#include <secp256k1_schnorrsig.h>
*/
import "C"

import "unsafe"

const backend = "libsecp256k1"

// pubKey is a parsed x-only key in libsecp256k1's opaque 64-byte form.
type pubKey struct {
	k C.secp256k1_xonly_pubkey
}

const pubKeySize = 64

// ctx is created once and never freed; verification only reads it, so it
// is safe for concurrent use. Creating it runs the library's self tests.
var ctx = C.secp256k1_context_create(C.SECP256K1_CONTEXT_NONE)

// parsePubKey parses the x-only key b into pk.
func parsePubKey(pk *pubKey, b *[32]byte) error {
	if C.secp256k1_xonly_pubkey_parse(ctx, &pk.k, (*C.uchar)(&b[0])) != 1 {
		if !lessBE(b[:], fieldPrime[:]) {
			return errPubKeyRange
		}
		return errPubKeyNotOnCurve
	}
	return nil
}

// verifyParsed checks sig over msg against the parsed key pk (pubkey, its
// serialization, is the Go backend's input to the challenge; the C
// library keeps its own).
func verifyParsed(pk *pubKey, _ *[32]byte, msg []byte, sig *[64]byte) error {
	// libsecp256k1 rejects r >= p and s >= n without saying so.
	if err := checkSigRange(sig); err != nil {
		return err
	}
	var m *C.uchar
	if len(msg) > 0 {
		m = (*C.uchar)(unsafe.Pointer(&msg[0]))
	}
	if C.secp256k1_schnorrsig_verify(ctx, (*C.uchar)(&sig[0]), m, C.size_t(len(msg)), &pk.k) != 1 {
		return ErrInvalidSignature
	}
	return nil
}
