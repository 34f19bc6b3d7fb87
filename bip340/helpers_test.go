package bip340

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
)

// iterations returns full, or race when the tests run under the race
// detector: the property loops it sizes drive one goroutine through pure
// arithmetic, which -race slows about tenfold and has nothing to check in
// (the concurrency tests keep their sizes). Without -race they run in full.
func iterations(full, race int) int {
	if raceEnabled {
		return race
	}
	return full
}

// signed is one valid (pubkey, msg, sig) triple.
type signed struct {
	pub [32]byte
	msg [32]byte
	sig [64]byte
}

// makeSigned returns n valid btcec signatures by `authors` distinct keys
// (round-robin), derived deterministically from seed. FastSign skips
// btcec's check of each signature it makes, most of the signing time:
// the tests verify them with btcec as the reference anyway.
func makeSigned(tb testing.TB, seed string, n, authors int) []signed {
	tb.Helper()
	keys := make([]*btcec.PrivateKey, authors)
	for i := range keys {
		d := sha256.Sum256(fmt.Appendf(nil, "%s/key/%d", seed, i))
		keys[i], _ = btcec.PrivKeyFromBytes(d[:])
	}
	out := make([]signed, n)
	for i := range out {
		k := keys[i%authors]
		out[i].msg = sha256.Sum256(fmt.Appendf(nil, "%s/msg/%d", seed, i))
		s, err := schnorr.Sign(k, out[i].msg[:], schnorr.FastSign())
		if err != nil {
			tb.Fatal(err)
		}
		out[i].sig = [64]byte(s.Serialize())
		out[i].pub = [32]byte(schnorr.SerializePubKey(k.PubKey()))
	}
	return out
}

// refVerify is the reference verdict from btcec/v2/schnorr, mapped onto
// this package's sentinels in BIP-340's order of checks.
//
// btcec v2.5.0's ParseSignature reduces s mod n instead of rejecting
// s >= n as BIP-340 requires, so that one check is made here. (It never
// turns an invalid signature valid in practice: a valid s' = s - n would
// need s' < 2^256 - n ≈ 2^128.)
func refVerify(pub *[32]byte, msg []byte, sig *[64]byte) error {
	pk, err := schnorr.ParsePubKey(pub[:])
	if err != nil {
		return ErrBadPubKey
	}
	s, err := schnorr.ParseSignature(sig[:])
	if err != nil {
		return ErrMalformedSignature
	}
	if !lessBE(sig[32:], curveOrder[:]) {
		return ErrMalformedSignature
	}
	if !s.Verify(msg, pk) {
		return ErrInvalidSignature
	}
	return nil
}

// sentinel returns which of the package's sentinels err wraps (nil for
// nil), failing the test for anything else.
func sentinel(t testing.TB, err error) error {
	t.Helper()
	for _, s := range []error{ErrBadPubKey, ErrMalformedSignature, ErrInvalidSignature} {
		if errors.Is(err, s) {
			return s
		}
	}
	if err != nil {
		t.Fatalf("error %v wraps no sentinel", err)
	}
	return nil
}
