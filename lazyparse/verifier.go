package lazyparse

import (
	"errors"
	"slices"

	"github.com/nostr-archiver/archiver/bip340"
)

// DefaultVerifiers returns a Verifier factory whose verifiers share one
// bip340.KeyCache (authors repeat across an archive, and a cached key
// skips lifting and table building on every later event) and check each
// batch with bip340's batch verification.
func DefaultVerifiers() func() Verifier {
	cache := bip340.NewKeyCache(0)
	return func() Verifier {
		var errs []error
		return func(items []bip340.Item, reasons []string) {
			errs = slices.Grow(errs[:0], len(items))[:len(items)]
			cache.VerifyBatch(items, errs)
			for i, err := range errs {
				reasons[i] = reasonOf(err)
			}
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
