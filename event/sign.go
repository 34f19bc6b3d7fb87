package event

import (
	"fmt"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
)

// Sign sets e.PubKey from sk, computes e.ID and signs it with BIP-340.
// The archiver signs only NIP-42 AUTH events; tests use it to make fixtures.
func (e *Event) Sign(sk *btcec.PrivateKey) error {
	copy(e.PubKey[:], schnorr.SerializePubKey(sk.PubKey()))
	e.ID, _ = e.ComputeID(nil)
	sig, err := schnorr.Sign(sk, e.ID[:])
	if err != nil {
		return fmt.Errorf("sign event: %w", err)
	}
	copy(e.Sig[:], sig.Serialize())
	return nil
}
