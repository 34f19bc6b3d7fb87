//go:build !libsecp256k1

package bip340

import "math/bits"

// fe is an element of GF(p), p = 2^256 - 2^32 - 977, held as four
// little-endian 64-bit limbs.
//
// decred's FieldVal (10x26-bit limbs) costs ~46 ns per multiply here, which
// puts the 128 doublings of one verification alone above the 40 µs budget;
// 64-bit limbs on math/bits (MULX/ADX intrinsics on amd64 and arm64) cost a
// third of that.
//
// Values are kept below 2^256 but not necessarily below p ("weakly
// reduced"): every operation accepts any 256-bit input and returns a result
// below 2^256. normalize brings a value into [0, p), which comparisons,
// parity and encoding need.
type fe [4]uint64

// feC is 2^256 mod p, used to fold anything at or above 2^256 back down.
const feC = 0x1000003D1

// setBytes sets z to the big-endian value b and reports whether b >= p
// (in which case z holds b - p, which callers reject anyway).
func (z *fe) setBytes(b *[32]byte) (overflow bool) {
	for i := range 4 {
		j := 24 - 8*i
		z[i] = uint64(b[j])<<56 | uint64(b[j+1])<<48 | uint64(b[j+2])<<40 | uint64(b[j+3])<<32 |
			uint64(b[j+4])<<24 | uint64(b[j+5])<<16 | uint64(b[j+6])<<8 | uint64(b[j+7])
	}
	return z.normalize()
}

// normalize reduces z into [0, p) and reports whether it had to.
func (z *fe) normalize() bool {
	// z < 2^256 < 2p, so at most one subtraction of p is needed, and
	// z >= p exactly when z + feC carries out of 2^256 (z + feC - 2^256 is
	// then z - p).
	t0, c := bits.Add64(z[0], feC, 0)
	t1, c := bits.Add64(z[1], 0, c)
	t2, c := bits.Add64(z[2], 0, c)
	t3, c := bits.Add64(z[3], 0, c)
	m := -c
	z[0] = z[0]&^m | t0&m
	z[1] = z[1]&^m | t1&m
	z[2] = z[2]&^m | t2&m
	z[3] = z[3]&^m | t3&m
	return c != 0
}

// isZero reports whether z ≡ 0 (mod p); z is normalized as a side effect.
func (z *fe) isZero() bool {
	z.normalize()
	return z[0]|z[1]|z[2]|z[3] == 0
}

// isOdd reports whether the canonical value of z is odd; z is normalized
// as a side effect.
func (z *fe) isOdd() bool {
	z.normalize()
	return z[0]&1 == 1
}

// equal reports whether x ≡ y (mod p).
func (x *fe) equal(y *fe) bool {
	var d fe
	d.sub(x, y)
	return d.isZero()
}

// add sets z = x + y.
func (z *fe) add(x, y *fe) *fe {
	r0, c := bits.Add64(x[0], y[0], 0)
	r1, c := bits.Add64(x[1], y[1], c)
	r2, c := bits.Add64(x[2], y[2], c)
	r3, c := bits.Add64(x[3], y[3], c)
	// A carry means the true sum is r + 2^256 ≡ r + feC. Adding feC can
	// carry once more only when r was within feC of 2^256, after which the
	// value is tiny and a second fold cannot carry.
	r0, c = bits.Add64(r0, feC&-c, 0)
	r1, c = bits.Add64(r1, 0, c)
	r2, c = bits.Add64(r2, 0, c)
	r3, c = bits.Add64(r3, 0, c)
	r0 += feC & -c
	z[0], z[1], z[2], z[3] = r0, r1, r2, r3
	return z
}

// sub sets z = x - y.
func (z *fe) sub(x, y *fe) *fe {
	r0, b := bits.Sub64(x[0], y[0], 0)
	r1, b := bits.Sub64(x[1], y[1], b)
	r2, b := bits.Sub64(x[2], y[2], b)
	r3, b := bits.Sub64(x[3], y[3], b)
	// A borrow means r = x - y + 2^256 ≡ x - y + feC; subtract feC. If that
	// borrows again r was below feC, and the wrapped value is large enough
	// that the second subtraction of feC cannot borrow.
	r0, b = bits.Sub64(r0, feC&-b, 0)
	r1, b = bits.Sub64(r1, 0, b)
	r2, b = bits.Sub64(r2, 0, b)
	r3, b = bits.Sub64(r3, 0, b)
	r0 -= feC & -b
	z[0], z[1], z[2], z[3] = r0, r1, r2, r3
	return z
}

// half sets z = x/2.
func (z *fe) half(x *fe) *fe {
	// x/2 is x>>1 for even x and (x+p)>>1 for odd x; x+p may reach 2^257,
	// so its carry becomes the top bit.
	m := -(x[0] & 1)
	r0, c := bits.Add64(x[0], 0xFFFFFFFEFFFFFC2F&m, 0)
	r1, c := bits.Add64(x[1], m, c)
	r2, c := bits.Add64(x[2], m, c)
	r3, c := bits.Add64(x[3], m, c)
	z[0] = r0>>1 | r1<<63
	z[1] = r1>>1 | r2<<63
	z[2] = r2>>1 | r3<<63
	z[3] = r3>>1 | c<<63
	return z
}

// neg sets z = -x.
func (z *fe) neg(x *fe) *fe {
	var zero fe
	return z.sub(&zero, x)
}

// mul sets z = x * y.
//
// Each row's four products are summed with two unbroken carry chains (low
// halves, then high halves), which the compiler turns into ADC sequences;
// folding single carries into a high word instead costs an extra
// flag-to-register conversion per product.
func (z *fe) mul(x, y *fe) *fe {
	x0, x1, x2, x3 := x[0], x[1], x[2], x[3]
	y0, y1, y2, y3 := y[0], y[1], y[2], y[3]
	var c, t0, t1, t2, t3, t4, t5, t6, t7 uint64

	h0, t0 := bits.Mul64(x0, y0)
	h1, l1 := bits.Mul64(x0, y1)
	h2, l2 := bits.Mul64(x0, y2)
	h3, l3 := bits.Mul64(x0, y3)
	t1, c = bits.Add64(h0, l1, 0)
	t2, c = bits.Add64(h1, l2, c)
	t3, c = bits.Add64(h2, l3, c)
	t4, _ = bits.Add64(h3, 0, c)

	h0, l0 := bits.Mul64(x1, y0)
	h1, l1 = bits.Mul64(x1, y1)
	h2, l2 = bits.Mul64(x1, y2)
	h3, l3 = bits.Mul64(x1, y3)
	t1, c = bits.Add64(t1, l0, 0)
	t2, c = bits.Add64(t2, l1, c)
	t3, c = bits.Add64(t3, l2, c)
	t4, c = bits.Add64(t4, l3, c)
	t5, _ = bits.Add64(h3, 0, c)
	t2, c = bits.Add64(t2, h0, 0)
	t3, c = bits.Add64(t3, h1, c)
	t4, c = bits.Add64(t4, h2, c)
	t5, _ = bits.Add64(t5, 0, c)

	h0, l0 = bits.Mul64(x2, y0)
	h1, l1 = bits.Mul64(x2, y1)
	h2, l2 = bits.Mul64(x2, y2)
	h3, l3 = bits.Mul64(x2, y3)
	t2, c = bits.Add64(t2, l0, 0)
	t3, c = bits.Add64(t3, l1, c)
	t4, c = bits.Add64(t4, l2, c)
	t5, c = bits.Add64(t5, l3, c)
	t6, _ = bits.Add64(h3, 0, c)
	t3, c = bits.Add64(t3, h0, 0)
	t4, c = bits.Add64(t4, h1, c)
	t5, c = bits.Add64(t5, h2, c)
	t6, _ = bits.Add64(t6, 0, c)

	h0, l0 = bits.Mul64(x3, y0)
	h1, l1 = bits.Mul64(x3, y1)
	h2, l2 = bits.Mul64(x3, y2)
	h3, l3 = bits.Mul64(x3, y3)
	t3, c = bits.Add64(t3, l0, 0)
	t4, c = bits.Add64(t4, l1, c)
	t5, c = bits.Add64(t5, l2, c)
	t6, c = bits.Add64(t6, l3, c)
	t7, _ = bits.Add64(h3, 0, c)
	t4, c = bits.Add64(t4, h0, 0)
	t5, c = bits.Add64(t5, h1, c)
	t6, c = bits.Add64(t6, h2, c)
	t7, _ = bits.Add64(t7, 0, c)
	z[0], z[1], z[2], z[3] = reduce(t0, t1, t2, t3, t4, t5, t6, t7)
	return z
}

// sqr sets z = x^2, computing each cross product once.
func (z *fe) sqr(x *fe) *fe {
	x0, x1, x2, x3 := x[0], x[1], x[2], x[3]
	var c uint64

	// Cross products x_i*x_j, i < j, into t1..t6.
	h1, t1 := bits.Mul64(x0, x1)
	h2, l2 := bits.Mul64(x0, x2)
	h3, l3 := bits.Mul64(x0, x3)
	t2, c := bits.Add64(h1, l2, 0)
	t3, c := bits.Add64(h2, l3, c)
	t4, _ := bits.Add64(h3, 0, c)
	h2, l2 = bits.Mul64(x1, x2)
	h3, l3 = bits.Mul64(x1, x3)
	t3, c = bits.Add64(t3, l2, 0)
	t4, c = bits.Add64(t4, l3, c)
	t5, _ := bits.Add64(h3, 0, c)
	t4, c = bits.Add64(t4, h2, 0)
	t5, _ = bits.Add64(t5, 0, c)
	h3, l3 = bits.Mul64(x2, x3)
	t5, c = bits.Add64(t5, l3, 0)
	t6, _ := bits.Add64(h3, 0, c)

	// Double them.
	t7 := t6 >> 63
	t6 = t6<<1 | t5>>63
	t5 = t5<<1 | t4>>63
	t4 = t4<<1 | t3>>63
	t3 = t3<<1 | t2>>63
	t2 = t2<<1 | t1>>63
	t1 <<= 1

	// Add the squares x_i^2 at limb 2i.
	h0, t0 := bits.Mul64(x0, x0)
	h1, l1 := bits.Mul64(x1, x1)
	h2, l2 = bits.Mul64(x2, x2)
	h3, l3 = bits.Mul64(x3, x3)
	t1, c = bits.Add64(t1, h0, 0)
	t2, c = bits.Add64(t2, l1, c)
	t3, c = bits.Add64(t3, h1, c)
	t4, c = bits.Add64(t4, l2, c)
	t5, c = bits.Add64(t5, h2, c)
	t6, c = bits.Add64(t6, l3, c)
	t7, _ = bits.Add64(t7, h3, c)

	z[0], z[1], z[2], z[3] = reduce(t0, t1, t2, t3, t4, t5, t6, t7)
	return z
}

// reduce returns the 512-bit t0..t7 modulo p (weakly).
func reduce(t0, t1, t2, t3, t4, t5, t6, t7 uint64) (r0, r1, r2, r3 uint64) {
	// t = hi*2^256 + lo ≡ hi*feC + lo; hi*feC spans five limbs.
	h0, l0 := bits.Mul64(t4, feC)
	h1, l1 := bits.Mul64(t5, feC)
	h2, l2 := bits.Mul64(t6, feC)
	h3, l3 := bits.Mul64(t7, feC)
	var c uint64
	r0, c = bits.Add64(t0, l0, 0)
	r1, c = bits.Add64(t1, l1, c)
	r2, c = bits.Add64(t2, l2, c)
	r3, c = bits.Add64(t3, l3, c)
	r4, _ := bits.Add64(h3, 0, c)
	r1, c = bits.Add64(r1, h0, 0)
	r2, c = bits.Add64(r2, h1, c)
	r3, c = bits.Add64(r3, h2, c)
	r4, _ = bits.Add64(r4, 0, c)

	// r4 < 2^34: fold it once more; r4*feC < 2^67 fits in two limbs.
	h, l := bits.Mul64(r4, feC)
	r0, c = bits.Add64(r0, l, 0)
	r1, c = bits.Add64(r1, h, c)
	r2, c = bits.Add64(r2, 0, c)
	r3, c = bits.Add64(r3, 0, c)
	// A last carry leaves r below 2^67, so adding feC cannot carry again.
	r0, c = bits.Add64(r0, feC&-c, 0)
	r1 += c
	return r0, r1, r2, r3
}

// sqrn sets z = x^(2^n).
func (z *fe) sqrn(x *fe, n int) *fe {
	z.sqr(x)
	for range n - 1 {
		z.sqr(z)
	}
	return z
}

// sqrt sets z to a square root of x and reports whether x is a square;
// z = x^((p+1)/4), which is a root exactly when one exists. The addition
// chain is libsecp256k1's: (p+1)/4 has runs of ones of lengths 2, 22 and
// 223, built from x^(2^k - 1) for k in 1, [2], 3, 6, 9, 11, [22], 44, 88,
// 176, 220, [223].
func (z *fe) sqrt(x *fe) bool {
	a := *x
	var x2, x3, x6, x9, x11, x22, x44, x88, x176, x220, x223 fe
	x2.sqr(&a).mul(&x2, &a)
	x3.sqr(&x2).mul(&x3, &a)
	x6.sqrn(&x3, 3).mul(&x6, &x3)
	x9.sqrn(&x6, 3).mul(&x9, &x3)
	x11.sqrn(&x9, 2).mul(&x11, &x2)
	x22.sqrn(&x11, 11).mul(&x22, &x11)
	x44.sqrn(&x22, 22).mul(&x44, &x22)
	x88.sqrn(&x44, 44).mul(&x88, &x44)
	x176.sqrn(&x88, 88).mul(&x176, &x88)
	x220.sqrn(&x176, 44).mul(&x220, &x44)
	x223.sqrn(&x220, 3).mul(&x223, &x3)
	z.sqrn(&x223, 23).mul(z, &x22)
	z.sqrn(z, 6).mul(z, &x2)
	z.sqrn(z, 2)
	var check fe
	return check.sqr(z).equal(&a)
}

// putBytes writes the canonical big-endian encoding of x into b.
func (x *fe) putBytes(b *[32]byte) {
	v := *x
	v.normalize()
	for i := range 4 {
		j := 24 - 8*i
		w := v[i]
		b[j], b[j+1], b[j+2], b[j+3] = byte(w>>56), byte(w>>48), byte(w>>40), byte(w>>32)
		b[j+4], b[j+5], b[j+6], b[j+7] = byte(w>>24), byte(w>>16), byte(w>>8), byte(w)
	}
}
