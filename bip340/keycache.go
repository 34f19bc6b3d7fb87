package bip340

import "sync"

// DefaultKeyCacheSize is the capacity NewKeyCache uses for capacity <= 0.
const DefaultKeyCacheSize = 1 << 16

// KeyCacheEntryBytes approximates the memory one cached key holds
// (the parsed key plus map overhead), for sizing a KeyCache.
const KeyCacheEntryBytes = pubKeySize + 32 + 48

// maxKeyCacheShards bounds the shards that spread concurrent workers'
// lock traffic; keys are uniformly random x coordinates, so their first
// byte picks a shard.
const maxKeyCacheShards = 16

// KeyCache keeps parsed (lifted, and in the pure-Go backend pre-multiplied)
// x-only public keys so that verifying a repeat author skips that work. It
// is bounded and safe for concurrent use: share one among all verify
// workers. Keys that fail to parse are not cached.
//
// Eviction is by generations per shard: a shard fills a current map; when
// it is full the map becomes the old generation (the previous old one is
// dropped) and hits in the old generation move back to the current one.
// The cache therefore holds at most capacity keys and always the most
// recently used half of that.
type KeyCache struct {
	perGen int // keys per generation per shard
	shards []keyShard
}

type keyShard struct {
	mu           sync.Mutex
	cur, old     map[[32]byte]*pubKey
	hits, misses uint64
	_            [64]byte // keep shards' locks on separate cache lines
}

// NewKeyCache returns a cache holding up to capacity keys, about
// capacity*KeyCacheEntryBytes bytes when full. capacity <= 0 means
// DefaultKeyCacheSize; the smallest cache holds 2 keys.
func NewKeyCache(capacity int) *KeyCache {
	if capacity <= 0 {
		capacity = DefaultKeyCacheSize
	}
	n := min(maxKeyCacheShards, max(1, capacity/2))
	c := &KeyCache{
		perGen: max(1, capacity/(2*n)),
		shards: make([]keyShard, n),
	}
	for i := range c.shards {
		c.shards[i].cur = make(map[[32]byte]*pubKey)
	}
	return c
}

// Verify is the package-level Verify, taking the parsed key from the
// cache (and adding it there on a miss).
func (c *KeyCache) Verify(pubkey *[32]byte, msg *[32]byte, sig *[64]byte) error {
	return c.verify(pubkey, msg[:], sig)
}

func (c *KeyCache) verify(pubkey *[32]byte, msg []byte, sig *[64]byte) error {
	pk, err := c.get(pubkey)
	if err != nil {
		return err
	}
	return verifyParsed(pk, pubkey, msg, sig)
}

// Len returns the number of keys cached.
func (c *KeyCache) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.cur) + len(s.old)
		s.mu.Unlock()
	}
	return n
}

// Stats returns the lookups that found a parsed key and those that had to
// parse one, since the cache was made.
func (c *KeyCache) Stats() (hits, misses uint64) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		hits += s.hits
		misses += s.misses
		s.mu.Unlock()
	}
	return hits, misses
}

func (c *KeyCache) get(key *[32]byte) (*pubKey, error) {
	s := &c.shards[int(key[0])%len(c.shards)]
	s.mu.Lock()
	pk := s.cur[*key]
	if pk == nil {
		if pk = s.old[*key]; pk != nil {
			delete(s.old, *key)
			c.insert(s, key, pk)
		}
	}
	if pk != nil {
		s.hits++
		s.mu.Unlock()
		return pk, nil
	}
	s.misses++
	s.mu.Unlock()

	// Parse outside the lock: it is the expensive part. Two workers
	// missing on the same key both parse it; the second insert wins,
	// which is harmless since both results are equal.
	pk = new(pubKey)
	if err := parsePubKey(pk, key); err != nil {
		return nil, err
	}
	s.mu.Lock()
	c.insert(s, key, pk)
	s.mu.Unlock()
	return pk, nil
}

// insert adds key to the shard's current generation, rotating
// generations when it is full. s.mu must be held.
func (c *KeyCache) insert(s *keyShard, key *[32]byte, pk *pubKey) {
	if _, ok := s.cur[*key]; !ok && len(s.cur) >= c.perGen {
		s.old = s.cur
		s.cur = make(map[[32]byte]*pubKey, c.perGen)
	}
	s.cur[*key] = pk
}
