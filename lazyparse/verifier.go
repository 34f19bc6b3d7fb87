package lazyparse

import (
	"errors"

	"github.com/nostr-archiver/archiver/bip340"
)

// DefaultVerifiers returns a Verifier factory whose verifiers share one
// bip340.KeyCache: authors repeat across an archive, and a cached key
// skips lifting and table building on every later event.
func DefaultVerifiers() func() Verifier {
	cache := bip340.NewKeyCache(0)
	return func() Verifier {
		return func(pubkey, msg *[32]byte, sig *[64]byte) string {
			return reasonOf(cache.Verify(pubkey, msg, sig))
		}
	}
}

func reasonOf(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, bip340.ErrBadPubKey):
		return ReasonBadPubKey
	default:
		return ReasonBadSig
	}
}
