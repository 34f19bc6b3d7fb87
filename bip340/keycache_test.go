package bip340

import (
	"errors"
	"sync"
	"testing"
)

func TestKeyCacheBounded(t *testing.T) {
	const capacity = 64
	c := NewKeyCache(capacity)
	n := iterations(300, 160) // distinct authors, well over the capacity
	sigs := makeSigned(t, "bounded", n, n)
	for i := range sigs {
		s := &sigs[i]
		if err := c.Verify(&s.pub, &s.msg, &s.sig); err != nil {
			t.Fatal(err)
		}
		if n := c.Len(); n > capacity {
			t.Fatalf("after %d keys the cache holds %d > %d", i+1, n, capacity)
		}
	}
	if n := c.Len(); n < capacity/2 {
		t.Fatalf("cache holds %d keys, want at least %d", n, capacity/2)
	}
	// The most recent author is still cached; the first has been evicted.
	_, misses := c.Stats()
	last, first := &sigs[len(sigs)-1], &sigs[0]
	if err := c.Verify(&last.pub, &last.msg, &last.sig); err != nil {
		t.Fatal(err)
	}
	if _, m := c.Stats(); m != misses {
		t.Fatalf("most recent key missed")
	}
	if err := c.Verify(&first.pub, &first.msg, &first.sig); err != nil {
		t.Fatal(err)
	}
	if _, m := c.Stats(); m != misses+1 {
		t.Fatalf("oldest key was still cached")
	}
}

func TestKeyCacheStats(t *testing.T) {
	c := NewKeyCache(0)
	sigs := makeSigned(t, "stats", 12, 3)
	for i := range sigs {
		s := &sigs[i]
		if err := c.Verify(&s.pub, &s.msg, &s.sig); err != nil {
			t.Fatal(err)
		}
	}
	// A bad key is reported and not cached.
	bad := sigs[0]
	bad.pub = [32]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	for range 2 {
		if err := c.Verify(&bad.pub, &bad.msg, &bad.sig); !errors.Is(err, ErrBadPubKey) {
			t.Fatalf("bad key: %v", err)
		}
	}
	hits, misses := c.Stats()
	if hits != 9 || misses != 5 || c.Len() != 3 {
		t.Fatalf("hits %d misses %d len %d, want 9, 5, 3", hits, misses, c.Len())
	}
}

// TestKeyCacheConcurrent shares one cache among goroutines (run with
// -race) and checks every verdict.
func TestKeyCacheConcurrent(t *testing.T) {
	c := NewKeyCache(8) // small, so generations rotate while in use
	sigs := makeSigned(t, "concurrent", 64, 16)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3 * len(sigs) {
				s := sigs[(i*7+w)%len(sigs)]
				if (i+w)%3 == 0 {
					s.msg[0] ^= 1
					if err := c.Verify(&s.pub, &s.msg, &s.sig); !errors.Is(err, ErrInvalidSignature) {
						errs <- err
						return
					}
					continue
				}
				if err := c.Verify(&s.pub, &s.msg, &s.sig); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("worker: %v", err)
	}
}

// TestKeyCacheSmall checks the bound for capacities below the shard
// count.
func TestKeyCacheSmall(t *testing.T) {
	sigs := makeSigned(t, "small", 20, 20)
	for _, capacity := range []int{1, 2, 3, 5, 31} {
		c := NewKeyCache(capacity)
		for i := range sigs {
			s := &sigs[i]
			if err := c.Verify(&s.pub, &s.msg, &s.sig); err != nil {
				t.Fatal(err)
			}
			if n := c.Len(); n > max(capacity, 2) {
				t.Fatalf("capacity %d: holds %d keys", capacity, n)
			}
		}
	}
}
