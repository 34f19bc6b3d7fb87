package lazyparse

import (
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
)

// DefaultVerifier returns the pure-Go BIP-340 verifier.
func DefaultVerifier() Verifier {
	return func(pubkey, msg *[32]byte, sig *[64]byte) string {
		pk, err := schnorr.ParsePubKey(pubkey[:])
		if err != nil {
			return ReasonBadPubKey
		}
		s, err := schnorr.ParseSignature(sig[:])
		if err != nil || !s.Verify(msg[:], pk) {
			return ReasonBadSig
		}
		return ""
	}
}
