//go:build !libsecp256k1

package bip340

import (
	"crypto/sha256"
	"hash"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"

	secp "github.com/decred/dcrd/dcrec/secp256k1/v4"
)

// Batch verification (BIP-340, "Batch Verification") checks u signatures
// with one equation,
//
//	(s_1 + a_2·s_2 + ... + a_u·s_u)·G
//	    = R_1 + a_2·R_2 + ... + a_u·R_u + e_1·P_1 + a_2·e_2·P_2 + ... + a_u·e_u·P_u,
//
// with R_i = lift_x(r_i), e_i the challenge and random a_i. It is
// evaluated as one Strauss multi-scalar multiplication whose doublings
// the whole batch shares; s enters only as one scalar sum against the
// static G tables. Per signature there remain the lift of R (a square
// root), the additions of a_i·R_i, and those of a_i·e_i, GLV-split as in
// ecmult, against the key's table and its λ image.
//
// The randomizers are sparse rather than 128-bit integers: a_i is a
// random NAF of 256 digits of which exactly 24 are nonzero (±1). NAFs
// are unique and lie in (-2n/3, 2n/3), so the C(233, 24)·2^24 ≈ 2^131.9
// choices hit each residue mod n at most twice, never 0: a batch
// holding a bad signature passes with probability below 2^-130, as with
// 128-bit a_i drawn uniformly. But a_i·R_i then costs 24 additions of ±R
// and no table of R's multiples (128-bit a_i in wNAF-4 need ~26 additions
// and a 4-point table per R; measured 10% slower per signature), for
// ~127 more doublings shared by the chunk. a_1 = 1; the others come from
// ChaCha8 seeded with a SHA-256 of the key, message and signature of
// every item in the equation, so results are reproducible yet cannot be
// steered by whoever chose the signatures.
//
// If the equation fails, the chunk is bisected, reusing all per-item
// work: the sum over a half is computed, that of the other half is the
// difference, a half whose sum is the point at infinity is cleared, and
// a single item is decided exactly (its equation holds exactly when
// Verify accepts it). Finding one bad item of 64 costs about 63 items'
// additions and 6 doubling chains, 0.7 of the chunk's time. Since many
// bad items would make bisection cost log2(u) sums per item, after
// maxBisectBad of them the remaining suspects are checked one by one
// against their own equation (holds).

const (
	// maxBatch caps the items of one multi-scalar multiplication; longer
	// slices are cut into near-equal chunks. Beyond 64 the shared
	// doublings save little (they are ~1.5% of the per-item cost at 64)
	// while scratch and the cost of finding a bad item grow.
	maxBatch = 64
	// maxBisectBad is how many bad items one chunk's bisection finds
	// before it checks the remaining suspects one at a time.
	maxBisectBad = 4
	// randLen and randWeight shape the randomizers (see above).
	randLen    = 256
	randWeight = 24

	// maxTerms bounds the digits per item: randWeight, and at most 26 of
	// each ~130-bit wNAF-5 GLV half.
	maxTerms = 80
)

// batchItem is one item that passed the checks preceding the curve
// equation, with what the equation needs.
type batchItem struct {
	i          int     // index in the chunk
	pk         *pubKey // the cached key, or nil if p holds the lifted key
	p, r       aff     // lifted key (no cache) and R = lift_x(r)
	e, s, as   secp.ModNScalar
	first, end int32 // its digits are terms[first:end]
}

// term is one nonzero wNAF digit d at bit pos, against the table of odd
// multiples starting at tab[ref].
type term struct {
	ref int32
	pos uint16
	d   int16
}

// batch is the scratch of one chunk, pooled so that a call allocates
// nothing in the steady state.
type batch struct {
	live  []batchItem
	tab   []aff // each R_i, then each key's table, then its λ image
	jacs  []jac
	terms []term
	next  []int32 // per term: the next term at the same bit, for sum
	head  [wnafLen]int32
	sub   []int32
	nbad  int
	h     hash.Hash
	seed  [32]byte
	rng   rand.ChaCha8
}

var batchPool = sync.Pool{New: func() any {
	return &batch{
		live:  make([]batchItem, 0, maxBatch),
		tab:   make([]aff, maxBatch*(1+2*tableP)),
		jacs:  make([]jac, maxBatch*tableP),
		terms: make([]term, 0, maxBatch*maxTerms),
		next:  make([]int32, 0, maxBatch*maxTerms),
		sub:   make([]int32, 0, maxBatch),
		h:     sha256.New(),
	}
}}

func verifyBatch(c *KeyCache, items []Item, errs []error) {
	if len(items) <= 1 {
		for i := range items {
			errs[i] = verifyOne(c, &items[i])
		}
		return
	}
	b := batchPool.Get().(*batch)
	defer batchPool.Put(b)
	chunks := (len(items) + maxBatch - 1) / maxBatch
	for k := range chunks {
		lo, hi := len(items)*k/chunks, len(items)*(k+1)/chunks
		b.verify(c, items[lo:hi], errs[lo:hi])
	}
}

// verify sets errs for a chunk of at most maxBatch items.
func (b *batch) verify(c *KeyCache, items []Item, errs []error) {
	b.live = b.live[:0]
	b.h.Reset()
	for i := range items {
		errs[i] = b.add(c, items, i)
	}
	if len(b.live) == 0 {
		return
	}
	b.prepare(c != nil)
	b.sub = b.sub[:0]
	for j := range b.live {
		b.sub = append(b.sub, int32(j))
	}
	b.nbad = 0
	if total := b.sum(b.sub); !total.inf {
		b.search(b.sub, &total, errs)
	}
}

// add makes the checks of single verification that precede the curve
// equation, in the same order and with the same errors, and queues
// items[i] for the equation if they pass.
func (b *batch) add(c *KeyCache, items []Item, i int) error {
	it := &items[i]
	n := len(b.live)
	l := &b.live[:n+1][n]
	if c != nil {
		pk, err := c.get(it.PubKey)
		if err != nil {
			return err
		}
		l.pk = pk
	} else {
		l.pk = nil
		if err := liftKey(&l.p, it.PubKey); err != nil {
			return err
		}
	}
	if err := checkSigRange(it.Sig); err != nil {
		return err
	}
	// r < p; if it is no x coordinate, no R can match it, which single
	// verification reports as an invalid signature.
	l.r.x.setBytes((*[32]byte)(it.Sig[:32]))
	if !l.r.liftX() {
		return ErrInvalidSignature
	}
	e := challenge(it.Sig[:32], it.PubKey, it.Msg[:])
	l.e.SetBytes(&e)
	l.s.SetBytes((*[32]byte)(it.Sig[32:]))
	l.i = i
	b.live = b.live[:n+1]
	// The randomizers are derived from everything the equation checks.
	b.h.Write(it.PubKey[:])
	b.h.Write(it.Msg[:])
	b.h.Write(it.Sig[:])
	return nil
}

// prepare builds the tables of the live items, draws their randomizers
// and computes their digits.
func (b *batch) prepare(cached bool) {
	// tab holds each R_i, then each key's table, then its λ image.
	n := len(b.live)
	offP, offL := n, n*(1+tableP)
	if !cached {
		for j := range b.live {
			oddMultiplesJac(b.jacs[j*tableP:(j+1)*tableP], &b.live[j].p)
		}
		toAffine(b.tab[offP:offL], b.jacs[:n*tableP])
	}
	for j := range b.live {
		l := &b.live[j]
		b.tab[j] = l.r
		pt := b.tab[offP+j*tableP : offP+(j+1)*tableP]
		if cached {
			copy(pt, l.pk.table[:])
		}
		lt := b.tab[offL+j*tableP : offL+(j+1)*tableP]
		for k := range lt {
			lt[k].x.mul(&pt[k].x, endoBeta)
			lt[k].y = pt[k].y
		}
	}

	b.h.Sum(b.seed[:0])
	b.rng.Seed(b.seed)
	b.terms = b.terms[:0]
	for j := range b.live {
		l := &b.live[j]
		l.first = int32(len(b.terms))
		// The equation is checked as Σ a_i·(s_i·G - R_i - e_i·P_i) = O.
		var a secp.ModNScalar
		if j == 0 {
			a.SetInt(1)
			b.terms = append(b.terms, term{ref: 0, pos: 0, d: -1})
		} else {
			a = b.randomizer(j)
		}
		l.as.Mul2(&a, &l.s)
		var k secp.ModNScalar
		k.Mul2(&a, &l.e).Negate()
		k1, k2, neg1, neg2 := glvSplit(&k)
		b.appendTerms(&k1, windowP, neg1, offP+j*tableP)
		b.appendTerms(&k2, windowP, neg2, offL+j*tableP)
		l.end = int32(len(b.terms))
	}
	b.next = slices.Grow(b.next[:0], len(b.terms))[:len(b.terms)]
}

// randomizer draws a random NAF a of length randLen with randWeight
// nonzero digits, appends the digits of -a against R (at tab[ref]) and
// returns a mod n.
func (b *batch) randomizer(ref int) secp.ModNScalar {
	// Pick randWeight distinct slots of randLen-randWeight+1, uniformly;
	// the k-th smallest slot q becomes bit q+k, so that no two digits are
	// adjacent.
	const slots = randLen - randWeight + 1
	var chosen [4]uint64
	for k := 0; k < randWeight; {
		v := b.rng.Uint64()
		for i := 0; i < 64 && k < randWeight; i += 8 {
			q := v >> i & 0xff
			if m := uint64(1) << (q % 64); q < slots && chosen[q/64]&m == 0 {
				chosen[q/64] |= m
				k++
			}
		}
	}
	signs := b.rng.Uint64()
	var plus, minus [4]uint64 // the positive and negative digits' bits
	k := 0
	for w, m := range chosen {
		for ; m != 0; m &= m - 1 {
			p := w*64 + bits.TrailingZeros64(m) + k
			if signs>>k&1 == 0 {
				plus[p/64] |= 1 << (p % 64)
				b.terms = append(b.terms, term{ref: int32(ref), pos: uint16(p), d: -1})
			} else {
				minus[p/64] |= 1 << (p % 64)
				b.terms = append(b.terms, term{ref: int32(ref), pos: uint16(p), d: 1})
			}
			k++
		}
	}
	a, neg := scalarOf(&plus), scalarOf(&minus)
	return *a.Add(neg.Negate())
}

// appendTerms appends the nonzero wNAF-w digits of ±k against the table
// at tab[ref].
func (b *batch) appendTerms(k *[4]uint64, w uint, neg bool, ref int) {
	var d [wnafLen]int16
	n := wnaf(&d, k, w, neg)
	for pos := 0; pos < n; pos++ {
		if v := d[pos]; v != 0 {
			b.terms = append(b.terms, term{ref: int32(ref), pos: uint16(pos), d: v})
			pos += int(w) - 1 // the next w-1 digits are zero
		}
	}
}

// sum returns Σ a_i·(s_i·G - R_i - e_i·P_i) over the live items sub,
// the point at infinity if their equation holds.
func (b *batch) sum(sub []int32) jac {
	var s secp.ModNScalar
	for _, j := range sub {
		s.Add(&b.live[j].as)
	}
	sl := limbsOf(&s)
	sLo, sHi := [4]uint64{sl[0], sl[1]}, [4]uint64{sl[2], sl[3]}
	var dLo, dHi [wnafLen]int16
	nLo := wnaf(&dLo, &sLo, windowG, false)
	nHi := wnaf(&dHi, &sHi, windowG, false)

	// Chain each bit's terms so that the loop below visits only those.
	top := max(nLo, nHi)
	for i := range b.head {
		b.head[i] = -1
	}
	for _, j := range sub {
		l := &b.live[j]
		for t := l.first; t < l.end; t++ {
			pos := b.terms[t].pos
			b.next[t] = b.head[pos]
			b.head[pos] = t
			top = max(top, int(pos)+1)
		}
	}

	g := gTables()
	acc := jac{inf: true}
	for i := top - 1; i >= 0; i-- {
		acc.double(&acc)
		for t := b.head[i]; t >= 0; t = b.next[t] {
			tm := &b.terms[t]
			addDigit(&acc, b.tab[tm.ref:], tm.d)
		}
		if i < nLo && dLo[i] != 0 {
			addDigit(&acc, g.g[:], dLo[i])
		}
		if i < nHi && dHi[i] != 0 {
			addDigit(&acc, g.h[:], dHi[i])
		}
	}
	return acc
}

// search sets the errors of the bad items among the live items sub,
// whose sum is total, not the point at infinity. The sum of the second
// half is total minus that of the first, so each step computes only one
// half's.
func (b *batch) search(sub []int32, total *jac, errs []error) {
	if len(sub) == 1 {
		b.nbad++
		errs[b.live[sub[0]].i] = ErrInvalidSignature
		return
	}
	if b.nbad >= maxBisectBad {
		// Many bad items: check the rest one by one.
		for _, j := range sub {
			if !b.holds(j) {
				errs[b.live[j].i] = ErrInvalidSignature
			}
		}
		return
	}
	left, right := sub[:len(sub)/2], sub[len(sub)/2:]
	l := b.sum(left)
	r := *total
	if !l.inf {
		b.search(left, &l, errs)
		r.sub(&r, &l)
	}
	if !r.inf {
		b.search(right, &r, errs)
	}
}

// holds reports whether live item j's own equation s·G - e·P = R holds,
// which is what Verify checks. It costs less than a sum over j alone,
// whose sparse randomizer needs a longer chain of doublings.
func (b *batch) holds(j int32) bool {
	l := &b.live[j]
	var tab *[tableP]aff
	if l.pk != nil {
		tab = &l.pk.table
	} else {
		tab = (*[tableP]aff)(b.tab[len(b.live)+int(j)*tableP:])
	}
	k := l.e
	sl := limbsOf(&l.s)
	var acc jac
	ecmult(&acc, tab, k.Negate(), &sl)
	if acc.inf {
		return false
	}
	// Compare with R projectively: X = x·Z^2, Y = y·Z^3.
	var z2, z3, t fe
	z2.sqr(&acc.z)
	z3.mul(&z2, &acc.z)
	return t.mul(&l.r.x, &z2).equal(&acc.x) && t.mul(&l.r.y, &z3).equal(&acc.y)
}
