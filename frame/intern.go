package frame

import (
	"hash/maphash"
	"sync/atomic"
)

// Subscription ids repeat: a crawler keeps a few subscriptions open per
// connection and each page brings hundreds of EVENTs for one of them. A
// small direct-mapped cache of recent ids turns the []byte -> string
// conversion into a hash and a compare, with no allocation, for all but
// the first EVENT of a page. Slots are replaced, never locked: a racing
// store only costs an allocation later.
const (
	internSlots  = 256
	maxInternLen = 64 // NIP-01 relays commonly cap sub ids at 64 bytes
)

var (
	internSeed  = maphash.MakeSeed()
	internTable [internSlots]atomic.Pointer[string]
)

// intern returns string(b), reusing a cached copy when it has one.
func intern(b []byte) string {
	if len(b) > maxInternLen {
		return string(b)
	}
	slot := &internTable[maphash.Bytes(internSeed, b)%internSlots]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	slot.Store(&s)
	return s
}
