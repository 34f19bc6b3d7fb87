//go:build !libsecp256k1

package bip340

import "math/bits"

// Variable-time modular inversion by Bernstein-Yang "safegcd" divsteps, a
// port of libsecp256k1's secp256k1_modinv64_var (src/modinv64_impl.h,
// MIT licence), specialised to the field prime. Every verification ends
// with an inversion (the parity of R's y needs affine coordinates) and an
// uncached key needs another; this takes about a fifth of the time of the
// Fermat power p-2.
//
// Numbers are in signed base 2^62: value = Σ v[i]·2^(62·i), limbs in
// (-2^62, 2^62) except transiently.
type s62 [5]int64

const m62 = ^uint64(0) >> 2

// The field prime in signed62 form (-(2^32+977) + 256·2^248), and its
// inverse modulo 2^62.
const (
	modP0     = -0x1000003D1
	modP4     = 256
	modPInv62 = 0x27C7F6E22DDACACF
)

var modP = s62{modP0, 0, 0, 0, modP4}

// i128 is a two's complement 128-bit accumulator.
type i128 struct{ hi, lo uint64 }

// mulI returns the signed 128-bit product a*b.
func mulI(a, b int64) i128 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	// The unsigned product of the two's complement encodings is off by
	// 2^64·(b if a < 0, plus a if b < 0).
	hi -= uint64(a>>63)&uint64(b) + uint64(b>>63)&uint64(a)
	return i128{hi, lo}
}

// accMul adds a*b to c.
func (c *i128) accMul(a, b int64) {
	m := mulI(a, b)
	var carry uint64
	c.lo, carry = bits.Add64(c.lo, m.lo, 0)
	c.hi, _ = bits.Add64(c.hi, m.hi, carry)
}

// rsh62 shifts c right by 62 bits, arithmetically.
func (c *i128) rsh62() {
	c.lo = c.lo>>62 | c.hi<<2
	c.hi = uint64(int64(c.hi) >> 62)
}

// trans is the 2x2 transition matrix of 62 divsteps, scaled by 2^62.
type trans struct{ u, v, q, r int64 }

// divsteps62 performs 62 divsteps on the low bits f0, g0 of f, g and
// returns the new eta (minus delta) and the matrix that applies them.
func divsteps62(eta int64, f0, g0 uint64) (int64, trans) {
	u, v, q, r := uint64(1), uint64(0), uint64(0), uint64(1)
	f, g := f0, g0
	i := 62
	for {
		// Divsteps with g even only halve g: do all of them at once; the
		// sentinel bit stops the count at i.
		zeros := bits.TrailingZeros64(g | ^uint64(0)<<uint(i))
		g >>= uint(zeros)
		u <<= uint(zeros)
		v <<= uint(zeros)
		eta -= int64(zeros)
		i -= zeros
		if i == 0 {
			break
		}
		var m, w uint64
		if eta < 0 {
			// Negate eta and replace (f, g) by (g, -f); then cancel up
			// to 6 low bits of g with a multiple of f (no more than i, as
			// we stop there, nor eta+1, as its sign flips there).
			eta = -eta
			f, g = g, -f
			u, q = q, -u
			v, r = r, -v
			limit := min(int(eta)+1, i)
			m = (^uint64(0) >> (64 - uint(limit))) & 63
			w = (f * g * (f*f - 2)) & m
		} else {
			// Cancel up to 4 low bits (eta tends to be small here).
			limit := min(int(eta)+1, i)
			m = (^uint64(0) >> (64 - uint(limit))) & 15
			w = f + (((f + 1) & 4) << 1)
			w = (-w * g) & m
		}
		g += f * w
		q += u * w
		r += v * w
	}
	return eta, trans{int64(u), int64(v), int64(q), int64(r)}
}

// updateDE sets [d, e] = t·[d, e] / 2^62 (mod p), adding the multiple of
// p that makes the division exact.
func updateDE(d, e *s62, t *trans) {
	d0, d1, d2, d3, d4 := d[0], d[1], d[2], d[3], d[4]
	e0, e1, e2, e3, e4 := e[0], e[1], e[2], e[3], e[4]
	u, v, q, r := t.u, t.v, t.q, t.r

	// [md, me] start as [u, q] if d < 0 plus [v, r] if e < 0, keeping the
	// result in range.
	sd, se := d4>>63, e4>>63
	md := (u & sd) + (v & se)
	me := (q & sd) + (r & se)
	cd := mulI(u, d0)
	cd.accMul(v, e0)
	ce := mulI(q, d0)
	ce.accMul(r, e0)
	// Correct md, me so that t·[d,e] + p·[md,me] has 62 zero low bits.
	md -= int64((modPInv62*cd.lo + uint64(md)) & m62)
	me -= int64((modPInv62*ce.lo + uint64(me)) & m62)
	cd.accMul(modP0, md)
	ce.accMul(modP0, me)
	cd.rsh62()
	ce.rsh62()

	// Limbs 1-3 of p are zero.
	cd.accMul(u, d1)
	cd.accMul(v, e1)
	ce.accMul(q, d1)
	ce.accMul(r, e1)
	d[0], e[0] = int64(cd.lo&m62), int64(ce.lo&m62)
	cd.rsh62()
	ce.rsh62()

	cd.accMul(u, d2)
	cd.accMul(v, e2)
	ce.accMul(q, d2)
	ce.accMul(r, e2)
	d[1], e[1] = int64(cd.lo&m62), int64(ce.lo&m62)
	cd.rsh62()
	ce.rsh62()

	cd.accMul(u, d3)
	cd.accMul(v, e3)
	ce.accMul(q, d3)
	ce.accMul(r, e3)
	d[2], e[2] = int64(cd.lo&m62), int64(ce.lo&m62)
	cd.rsh62()
	ce.rsh62()

	cd.accMul(u, d4)
	cd.accMul(v, e4)
	ce.accMul(q, d4)
	ce.accMul(r, e4)
	cd.accMul(modP4, md)
	ce.accMul(modP4, me)
	d[3], e[3] = int64(cd.lo&m62), int64(ce.lo&m62)
	cd.rsh62()
	ce.rsh62()
	d[4], e[4] = int64(cd.lo), int64(ce.lo)
}

// updateFG sets [f, g] = t·[f, g] / 2^62 over their first n limbs.
func updateFG(n int, f, g *s62, t *trans) {
	u, v, q, r := t.u, t.v, t.q, t.r
	cf := mulI(u, f[0])
	cf.accMul(v, g[0])
	cg := mulI(q, f[0])
	cg.accMul(r, g[0])
	cf.rsh62()
	cg.rsh62()
	for i := 1; i < n; i++ {
		fi, gi := f[i], g[i]
		cf.accMul(u, fi)
		cf.accMul(v, gi)
		cg.accMul(q, fi)
		cg.accMul(r, gi)
		f[i-1], g[i-1] = int64(cf.lo&m62), int64(cg.lo&m62)
		cf.rsh62()
		cg.rsh62()
	}
	f[n-1], g[n-1] = int64(cf.lo), int64(cg.lo)
}

// normalize62 brings r from (-2p, p) to [0, p), negating it first if sign
// is negative.
func normalize62(r *s62, sign int64) {
	r0, r1, r2, r3, r4 := r[0], r[1], r[2], r[3], r[4]
	add := r4 >> 63
	r0 += modP0 & add
	r4 += modP4 & add
	neg := sign >> 63
	r0 = (r0 ^ neg) - neg
	r1 = (r1 ^ neg) - neg
	r2 = (r2 ^ neg) - neg
	r3 = (r3 ^ neg) - neg
	r4 = (r4 ^ neg) - neg
	r1 += r0 >> 62
	r0 &= int64(m62)
	r2 += r1 >> 62
	r1 &= int64(m62)
	r3 += r2 >> 62
	r2 &= int64(m62)
	r4 += r3 >> 62
	r3 &= int64(m62)
	add = r4 >> 63
	r0 += modP0 & add
	r4 += modP4 & add
	r1 += r0 >> 62
	r0 &= int64(m62)
	r2 += r1 >> 62
	r1 &= int64(m62)
	r3 += r2 >> 62
	r2 &= int64(m62)
	r4 += r3 >> 62
	r3 &= int64(m62)
	*r = s62{r0, r1, r2, r3, r4}
}

// inv sets z = 1/x (0 for x ≡ 0).
func (z *fe) inv(x *fe) *fe {
	a := *x
	a.normalize()
	g := s62{
		int64(a[0] & m62),
		int64((a[0]>>62 | a[1]<<2) & m62),
		int64((a[1]>>60 | a[2]<<4) & m62),
		int64((a[2]>>58 | a[3]<<6) & m62),
		int64(a[3] >> 56),
	}
	d, e, f := s62{}, s62{1}, modP
	n := 5
	eta := int64(-1)
	for {
		var t trans
		eta, t = divsteps62(eta, uint64(f[0]), uint64(g[0]))
		updateDE(&d, &e, &t)
		updateFG(n, &f, &g, &t)
		if g[0] == 0 {
			var c int64
			for j := 1; j < n; j++ {
				c |= g[j]
			}
			if c == 0 {
				break
			}
		}
		// Drop the top limb when it is 0 or -1 in both f and g, folding
		// its sign into the limb below.
		fn, gn := f[n-1], g[n-1]
		c := (int64(n) - 2) >> 63
		c |= fn ^ (fn >> 63)
		c |= gn ^ (gn >> 63)
		if c == 0 {
			f[n-2] |= int64(uint64(fn) << 62)
			g[n-2] |= int64(uint64(gn) << 62)
			n--
		}
	}
	// g = 0 and f = ±1 (x ≢ 0), so d = ±1/x.
	normalize62(&d, f[n-1])
	z[0] = uint64(d[0]) | uint64(d[1])<<62
	z[1] = uint64(d[1])>>2 | uint64(d[2])<<60
	z[2] = uint64(d[2])>>4 | uint64(d[3])<<58
	z[3] = uint64(d[3])>>6 | uint64(d[4])<<56
	return z
}
