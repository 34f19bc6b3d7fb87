package bip340

// Item is one signature to check in a batch: sig over the 32-byte msg by
// the x-only public key pubkey, as in Verify.
type Item struct {
	PubKey, Msg *[32]byte
	Sig         *[64]byte
}

// VerifyBatch sets errs[i] to exactly what Verify would return for
// items[i]. When most signatures are valid it is faster than verifying
// them one by one: the pure-Go backend checks up to 64 at a time with one
// randomized multi-scalar multiplication (BIP-340 "Batch Verification")
// and searches for the bad ones only when that check fails. That search
// costs about as much as 30 single verifications for one bad signature
// in 64, so above about 1.5% bad signatures single verification is
// cheaper (a chunk of only bad ones takes twice as long). The
// randomizers are derived from a hash of the batch's inputs, so results
// are reproducible, and a batch accepts an invalid signature with
// probability below 2^-128 however the signatures were chosen. With
// -tags libsecp256k1 it verifies one by one. It panics if
// len(errs) != len(items).
func VerifyBatch(items []Item, errs []error) {
	checkBatchLen(items, errs)
	verifyBatch(nil, items, errs)
}

// VerifyBatch is the package-level VerifyBatch, taking parsed keys from
// the cache (and adding them there on a miss): errs[i] is what
// c.Verify would return for items[i].
func (c *KeyCache) VerifyBatch(items []Item, errs []error) {
	checkBatchLen(items, errs)
	verifyBatch(c, items, errs)
}

func checkBatchLen(items []Item, errs []error) {
	if len(errs) != len(items) {
		panic("bip340: VerifyBatch: len(errs) != len(items)")
	}
}

// verifyOne is Verify, or c.Verify if c is not nil.
func verifyOne(c *KeyCache, it *Item) error {
	if c != nil {
		return c.Verify(it.PubKey, it.Msg, it.Sig)
	}
	return Verify(it.PubKey, it.Msg, it.Sig)
}
