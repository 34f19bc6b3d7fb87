//go:build libsecp256k1

package bip340

// verifyBatch verifies one item at a time: the libsecp256k1 releases
// packaged today have no batch verification.
func verifyBatch(c *KeyCache, items []Item, errs []error) {
	for i := range items {
		errs[i] = verifyOne(c, &items[i])
	}
}
