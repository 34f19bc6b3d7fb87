package bip340

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/btcsuite/btcd/btcec/v2"
	secp "github.com/decred/dcrd/dcrec/secp256k1/v4"
)

// errUnset fills result slices so that an item VerifyBatch leaves unset
// shows up as a mismatch.
var errUnset = errors.New("unset")

// checkBatch runs VerifyBatch and KeyCache.VerifyBatch (on c, twice: keys
// missing, then cached) on items and fails unless every result is the
// very error Verify returns for that item. It returns those errors.
func checkBatch(t testing.TB, c *KeyCache, items []Item) []error {
	t.Helper()
	want := make([]error, len(items))
	for i, it := range items {
		want[i] = Verify(it.PubKey, it.Msg, it.Sig)
	}
	got := make([]error, len(items))
	for _, run := range []struct {
		name   string
		verify func([]Item, []error)
	}{
		{"VerifyBatch", VerifyBatch},
		{"KeyCache.VerifyBatch", c.VerifyBatch},
		{"KeyCache.VerifyBatch (cached)", c.VerifyBatch},
	} {
		for i := range got {
			got[i] = errUnset
		}
		run.verify(items, got)
		for i := range items {
			if got[i] != want[i] {
				t.Fatalf("%s of %d items: item %d (%x, %x, %x) = %v, Verify says %v",
					run.name, len(items), i, *items[i].PubKey, *items[i].Msg, *items[i].Sig, got[i], want[i])
			}
		}
	}
	return want
}

// itemsOf returns items pointing into sigs.
func itemsOf(sigs []signed) []Item {
	items := make([]Item, len(sigs))
	for i := range sigs {
		s := &sigs[i]
		items[i] = Item{PubKey: &s.pub, Msg: &s.msg, Sig: &s.sig}
	}
	return items
}

// pick returns n copies of random elements of pool.
func pick(rng *rand.Rand, pool []signed, n int) []signed {
	out := make([]signed, n)
	for i := range out {
		out[i] = pool[rng.IntN(len(pool))]
	}
	return out
}

// TestVerifyBatchVectors places the official vectors (those with 32-byte
// messages, the only ones an Item can hold) at random positions in
// batches of valid signatures, one at a time and all together.
func TestVerifyBatchVectors(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pool := makeSigned(t, "batch-vectors", iterations(120, 40), 40)
	var vs []vector
	for _, v := range loadVectors(t) {
		if len(v.msg) == 32 {
			vs = append(vs, v)
		}
	}
	if len(vs) != 15 {
		t.Fatalf("%d vectors with 32-byte messages, want 15", len(vs))
	}
	toSigned := func(v vector) signed {
		return signed{pub: v.pubKey, msg: [32]byte(v.msg), sig: v.sig}
	}
	check := func(sigs []signed, at map[int]vector) {
		t.Helper()
		errs := checkBatch(t, NewKeyCache(16), itemsOf(sigs))
		for i, err := range errs {
			v, ok := at[i]
			switch {
			case !ok && err != nil:
				t.Fatalf("valid signature %d: %v", i, err)
			case ok && v.valid && err != nil:
				t.Fatalf("vector %d: %v, want valid (%s)", v.index, err, v.comment)
			case ok && !v.valid && !errors.Is(err, wantErr[v.index]):
				t.Fatalf("vector %d: %v, want %v (%s)", v.index, err, wantErr[v.index], v.comment)
			}
		}
	}
	for _, v := range vs {
		check([]signed{toSigned(v)}, map[int]vector{0: v})
		for range iterations(3, 1) {
			sigs := pick(rng, pool, 1+rng.IntN(100))
			pos := rng.IntN(len(sigs) + 1)
			sigs = append(sigs[:pos], append([]signed{toSigned(v)}, sigs[pos:]...)...)
			check(sigs, map[int]vector{pos: v})
		}
	}
	for range iterations(3, 1) {
		// All vectors among 60 valid signatures, shuffled.
		sigs := pick(rng, pool, 60)
		from := make([]int, len(sigs)) // index in vs + 1; 0 for pool
		for k, v := range vs {
			sigs = append(sigs, toSigned(v))
			from = append(from, k+1)
		}
		rng.Shuffle(len(sigs), func(i, j int) {
			sigs[i], sigs[j] = sigs[j], sigs[i]
			from[i], from[j] = from[j], from[i]
		})
		at := map[int]vector{}
		for i, k := range from {
			if k > 0 {
				at[i] = vs[k-1]
			}
		}
		check(sigs, at)
	}
}

// forgery corrupts a valid signature in one way; want is the sentinel
// Verify must report.
type forgery struct {
	name  string
	want  error
	apply func(rng *rand.Rand, s *signed, other *signed)
}

// notOnCurve is an x coordinate below p with no curve point (the key of
// BIP-340 vector 5).
var notOnCurve = [32]byte{
	0xee, 0xfd, 0xea, 0x4c, 0xdb, 0x67, 0x77, 0x50, 0xa4, 0x20, 0xfe, 0xe8, 0x07, 0xea, 0xcf, 0x21,
	0xeb, 0x98, 0x98, 0xae, 0x79, 0xb9, 0x76, 0x87, 0x66, 0xe4, 0xfa, 0xa0, 0x4a, 0x2d, 0x4a, 0x34,
}

// vector0Key is a valid key (that of BIP-340 vector 0).
var vector0Key = [32]byte{
	0xf9, 0x30, 0x8a, 0x01, 0x92, 0x58, 0xc3, 0x10, 0x49, 0x34, 0x4f, 0x85, 0xf8, 0x9d, 0x52, 0x29,
	0xb5, 0x31, 0xc8, 0x45, 0x83, 0x6f, 0x99, 0xb0, 0x86, 0x01, 0xf1, 0x13, 0xbc, 0xe0, 0x36, 0xf9,
}

var forgeries = []forgery{
	{"s bit", ErrInvalidSignature, func(rng *rand.Rand, s, _ *signed) { s.sig[32+rng.IntN(32)] ^= 1 << rng.IntN(8) }},
	{"r bit", ErrInvalidSignature, func(rng *rand.Rand, s, _ *signed) { s.sig[rng.IntN(32)] ^= 1 << rng.IntN(8) }},
	{"msg bit", ErrInvalidSignature, func(rng *rand.Rand, s, _ *signed) { s.msg[rng.IntN(32)] ^= 1 << rng.IntN(8) }},
	{"other key", ErrInvalidSignature, func(_ *rand.Rand, s, o *signed) { s.pub = o.pub }},
	{"r not on curve", ErrInvalidSignature, func(_ *rand.Rand, s, _ *signed) { copy(s.sig[:32], notOnCurve[:]) }},
	{"r >= p", ErrMalformedSignature, func(rng *rand.Rand, s, _ *signed) {
		copy(s.sig[:32], fieldPrime[:])
		s.sig[31] += byte(rng.IntN(3))
	}},
	{"s >= n", ErrMalformedSignature, func(rng *rand.Rand, s, _ *signed) {
		copy(s.sig[32:], curveOrder[:])
		s.sig[63] += byte(rng.IntN(3))
	}},
	{"key x >= p", ErrBadPubKey, func(rng *rand.Rand, s, _ *signed) {
		copy(s.pub[:], fieldPrime[:])
		s.pub[31] += byte(rng.IntN(3))
	}},
	{"key not on curve", ErrBadPubKey, func(_ *rand.Rand, s, _ *signed) { s.pub = notOnCurve }},
	{"bad key and r >= p", ErrBadPubKey, func(_ *rand.Rand, s, _ *signed) {
		s.pub = notOnCurve
		copy(s.sig[:32], fieldPrime[:])
	}},
	{"R with odd y", ErrInvalidSignature, func(rng *rand.Rand, s, _ *signed) { *s = signOddR(rng) }},
}

// signOddR signs a random message with a random key as BIP-340 does,
// except that the nonce point R has an odd y and is not negated: then
// s·G - e·P is R, with the right x but not lift_x(r) (BIP-340 vector 6).
func signOddR(rng *rand.Rand) signed {
	random := func() (b [32]byte) {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	var out signed
	out.msg = random()
	db, kb := random(), random()
	d, pub := btcec.PrivKeyFromBytes(db[:])
	if c := pub.SerializeCompressed(); c[0] == 3 {
		d.Key.Negate()
	}
	out.pub = [32]byte(pub.SerializeCompressed()[1:])
	for {
		k, r := btcec.PrivKeyFromBytes(kb[:])
		if c := r.SerializeCompressed(); c[0] == 3 {
			copy(out.sig[:32], c[1:])
			h := challenge(out.sig[:32], &out.pub, out.msg[:])
			var e secp.ModNScalar
			e.SetBytes(&h)
			e.Mul(&d.Key).Add(&k.Key)
			e.PutBytesUnchecked(out.sig[32:])
			return out
		}
		kb = random()
	}
}

// forge corrupts sigs[i] for each i in bad with a random forgery and
// returns which one each got.
func forge(rng *rand.Rand, sigs []signed, bad []int) map[int]forgery {
	keys := make([][32]byte, len(sigs)) // before any is forged
	for i := range sigs {
		keys[i] = sigs[i].pub
	}
	out := map[int]forgery{}
	for _, i := range bad {
		f := forgeries[rng.IntN(len(forgeries))]
		other := &signed{pub: keys[(i+1)%len(sigs)]}
		if other.pub == sigs[i].pub {
			other.pub = vector0Key
		}
		f.apply(rng, &sigs[i], other)
		out[i] = f
	}
	return out
}

// checkFlagged fails unless exactly the forged items have errors, each
// the one its forgery implies.
func checkFlagged(t *testing.T, errs []error, forged map[int]forgery) {
	t.Helper()
	for i, err := range errs {
		f, ok := forged[i]
		if !ok && err != nil {
			t.Fatalf("item %d of %d is valid but got %v", i, len(errs), err)
		}
		if ok && !errors.Is(err, f.want) {
			t.Fatalf("item %d of %d (%s) got %v, want %v", i, len(errs), f.name, err, f.want)
		}
	}
}

// TestVerifyBatchForged flags exactly the forged items of random batches
// (sizes 1 to 200, so also several chunks) holding 0 to 3 forgeries.
func TestVerifyBatchForged(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	pool := makeSigned(t, "batch-forged", iterations(200, 60), 50)
	seen := map[string]bool{}
	for range iterations(60, 25) { // the first 25 batches try every forgery
		sigs := pick(rng, pool, 1+rng.IntN(200))
		bad := rng.Perm(len(sigs))[:min(len(sigs), rng.IntN(4))]
		forged := forge(rng, sigs, bad)
		for _, f := range forged {
			seen[f.name] = true
		}
		checkFlagged(t, checkBatch(t, NewKeyCache(32), itemsOf(sigs)), forged)
	}
	if len(seen) != len(forgeries) {
		t.Fatalf("only forgeries %v were tried", seen)
	}
}

// TestVerifyBatchEveryPosition moves one bad signature through every
// position of a full chunk, and two through pairs of positions, so that
// every branch of the search for them is taken.
func TestVerifyBatchEveryPosition(t *testing.T) {
	const n = 64
	valid := makeSigned(t, "batch-position", n, n)
	bad := func(s *signed) { s.sig[40] ^= 4 }
	c := NewKeyCache(0)
	for i := range n {
		sigs := append([]signed(nil), valid...)
		bad(&sigs[i])
		j := (i * 37) % n
		errs := make([]error, n)
		c.VerifyBatch(itemsOf(sigs), errs)
		checkFlagged(t, errs, map[int]forgery{i: {want: ErrInvalidSignature}})
		if j != i {
			bad(&sigs[j])
			c.VerifyBatch(itemsOf(sigs), errs)
			checkFlagged(t, errs, map[int]forgery{i: {want: ErrInvalidSignature}, j: {want: ErrInvalidSignature}})
		}
	}
}

// TestVerifyBatchManyBad covers batches where many or all items are bad,
// and batches repeating one signature.
func TestVerifyBatchManyBad(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	pool := makeSigned(t, "batch-many", iterations(130, 40), 30)
	for _, n := range []int{2, 3, 5, 64, 65, 130} {
		for _, frac := range []float64{0.1, 0.5, 1} {
			t.Run(fmt.Sprintf("%d/%v", n, frac), func(t *testing.T) {
				sigs := pick(rng, pool, n)
				forged := forge(rng, sigs, rng.Perm(n)[:max(1, int(frac*float64(n)))])
				checkFlagged(t, checkBatch(t, NewKeyCache(8), itemsOf(sigs)), forged)
			})
		}
	}
	t.Run("repeated", func(t *testing.T) {
		sigs := make([]signed, 70)
		for i := range sigs {
			sigs[i] = pool[0]
		}
		checkFlagged(t, checkBatch(t, NewKeyCache(8), itemsOf(sigs)), nil)
		forged := forge(rng, sigs, []int{3, 66})
		checkFlagged(t, checkBatch(t, NewKeyCache(8), itemsOf(sigs)), forged)
	})
}

// TestVerifyBatchCancelling forges pairs of signatures whose errors
// cancel in the unweighted sum (s_1 + δ, s_2 - δ): only the randomizers
// make the batch equation catch them.
func TestVerifyBatchCancelling(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	pool := makeSigned(t, "batch-cancel", 64, 64)
	for _, n := range []int{2, 3, 64} {
		sigs := pick(rng, pool, n)
		i, j := 0, n-1
		var d, si, sj secp.ModNScalar
		d.SetInt(uint32(1 + rng.IntN(1000)))
		si.SetByteSlice(sigs[i].sig[32:])
		sj.SetByteSlice(sigs[j].sig[32:])
		si.Add(&d)
		sj.Add(d.Negate())
		si.PutBytesUnchecked(sigs[i].sig[32:])
		sj.PutBytesUnchecked(sigs[j].sig[32:])
		forged := map[int]forgery{i: {want: ErrInvalidSignature}, j: {want: ErrInvalidSignature}}
		checkFlagged(t, checkBatch(t, NewKeyCache(8), itemsOf(sigs)), forged)
	}
}

// TestVerifyBatchDifferential checks VerifyBatch against btcec on valid
// signatures mixed with random corruptions of them.
func TestVerifyBatchDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	pool := makeSigned(t, "batch-differential", iterations(300, 80), 60)
	c := NewKeyCache(64)
	counts := map[error]int{}
	for range iterations(12, 4) {
		sigs := pick(rng, pool, 1+rng.IntN(100))
		for i := range sigs {
			s := &sigs[i]
			switch rng.IntN(12) {
			case 0:
				s.sig[rng.IntN(64)] ^= 1 << rng.IntN(8)
			case 1:
				s.msg[rng.IntN(32)] ^= 1 << rng.IntN(8)
			case 2:
				s.pub[rng.IntN(32)] ^= 1 << rng.IntN(8)
			}
		}
		items := itemsOf(sigs)
		want := make([]error, len(sigs))
		for i, s := range sigs {
			want[i] = refVerify(&s.pub, s.msg[:], &s.sig)
		}
		for _, verify := range []func([]Item, []error){VerifyBatch, c.VerifyBatch} {
			errs := make([]error, len(items))
			verify(items, errs)
			for i, s := range sigs {
				if got := sentinel(t, errs[i]); got != want[i] {
					t.Fatalf("item %d of %d (%x, %x, %x) = %v, btcec says %v", i, len(sigs), s.pub, s.msg, s.sig, errs[i], want[i])
				}
				counts[want[i]]++
			}
		}
	}
	if counts[nil] == 0 || counts[ErrInvalidSignature] == 0 || counts[ErrBadPubKey] == 0 {
		t.Fatalf("verdicts %v: some paths were not exercised", counts)
	}
}

// TestVerifyBatchConcurrent shares one small cache (so generations
// rotate) and the scratch pool among goroutines (run with -race).
func TestVerifyBatchConcurrent(t *testing.T) {
	pool := makeSigned(t, "batch-concurrent", 80, 20)
	c := NewKeyCache(8)
	var wg sync.WaitGroup
	fail := make(chan string, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(15, uint64(w)))
			for range 3 {
				sigs := pick(rng, pool, 40)
				sigs[w].msg[0] ^= 1
				errs := make([]error, len(sigs))
				c.VerifyBatch(itemsOf(sigs), errs)
				for i, err := range errs {
					if (i == w) != errors.Is(err, ErrInvalidSignature) || (i != w && err != nil) {
						fail <- fmt.Sprintf("worker %d item %d: %v", w, i, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(fail)
	for msg := range fail {
		t.Fatal(msg)
	}
}

func TestVerifyBatchLengthMismatch(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for len(errs) != len(items)")
		}
	}()
	VerifyBatch(make([]Item, 2), make([]error, 1))
}

// TestVerifyBatchAllocs checks that a call's allocations do not grow
// with the batch: scratch is pooled. The race detector's sync.Pool drops
// a quarter of what is put back, at random, and a call that then finds it
// empty allocates its scratch anew: under -race the fewest allocations of
// ten calls are checked (their average failed one run in thirty), else
// the average.
func TestVerifyBatchAllocs(t *testing.T) {
	c := NewKeyCache(0)
	items := itemsOf(makeSigned(t, "batch-allocs", 200, 20))
	errs := make([]error, len(items))
	call := func() { c.VerifyBatch(items, errs) }
	var a float64
	if raceEnabled {
		a = math.Inf(1)
		for range 10 {
			a = min(a, testing.AllocsPerRun(1, call))
		}
	} else {
		a = testing.AllocsPerRun(10, call)
	}
	if a > 4 {
		t.Fatalf("%v allocations per call of 200 items", a)
	}
}

// FuzzVerifyBatch compares VerifyBatch and KeyCache.VerifyBatch with
// Verify on batches built from the input: its first byte picks how many
// valid signatures to include, the rest is a series of 129-byte records
// (position byte, then pubkey || msg || sig as in FuzzVerify) inserted
// among them. Seeds are valid signatures and the official vectors, whose
// mutations give the near-valid items that random bytes never do.
func FuzzVerifyBatch(f *testing.F) {
	valid := makeSigned(f, "fuzz-batch", 16, 6)
	record := func(pos byte, s signed) []byte {
		return append(append(append([]byte{pos}, s.pub[:]...), s.msg[:]...), s.sig[:]...)
	}
	f.Add(append([]byte{5}, record(3, valid[0])...))
	f.Add(append(append([]byte{9}, record(0, valid[1])...), record(7, valid[2])...))
	for _, v := range loadVectors(f) {
		if len(v.msg) == 32 {
			f.Add(append([]byte{byte(v.index)}, record(byte(v.index), signed{pub: v.pubKey, msg: [32]byte(v.msg), sig: v.sig})...))
		}
	}
	cache := NewKeyCache(16)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		sigs := append([]signed(nil), valid[:int(data[0])%(len(valid)+1)]...)
		for rec := data[1:]; len(rec) > 0 && len(sigs) < 40; rec = rec[min(len(rec), 129):] {
			var in [129]byte
			copy(in[:], rec)
			s := signed{pub: [32]byte(in[1:33]), msg: [32]byte(in[33:65]), sig: [64]byte(in[65:])}
			pos := int(in[0]) % (len(sigs) + 1)
			sigs = append(sigs[:pos], append([]signed{s}, sigs[pos:]...)...)
		}
		checkBatch(t, cache, itemsOf(sigs))
	})
}
