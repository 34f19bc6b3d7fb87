//go:build !libsecp256k1

package bip340

import (
	"math/big"
	"math/rand/v2"
	"testing"
)

var bigP, _ = new(big.Int).SetString("fffffffffffffffffffffffffffffffffffffffffffffffffffffffefffffc2f", 16)

func feBig(x *fe) *big.Int {
	var b [32]byte
	for i := range 4 {
		for j := range 8 {
			b[31-8*i-j] = byte(x[i] >> (8 * j))
		}
	}
	return new(big.Int).SetBytes(b[:]) // the raw (possibly unreduced) value
}

// feEdge are raw limb patterns around the places where carries and
// reductions change behaviour: 0, 1, p-1, p, p+1, 2^256-1, 2^256-feC, ...
var feEdge = []fe{
	{0, 0, 0, 0},
	{1, 0, 0, 0},
	{7, 0, 0, 0},
	{0xFFFFFFFEFFFFFC2E, ^uint64(0), ^uint64(0), ^uint64(0)}, // p-1
	{0xFFFFFFFEFFFFFC2F, ^uint64(0), ^uint64(0), ^uint64(0)}, // p
	{0xFFFFFFFEFFFFFC30, ^uint64(0), ^uint64(0), ^uint64(0)}, // p+1
	{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)},         // 2^256-1
	{^uint64(0) - feC + 1, ^uint64(0), ^uint64(0), ^uint64(0)},
	{^uint64(0) - feC, ^uint64(0), ^uint64(0), ^uint64(0)},
	{feC, 0, 0, 0},
	{feC - 1, 0, 0, 0},
	{0, 0, 0, 1 << 63},
	{^uint64(0), 0, 0, 0},
	{0, ^uint64(0), 0, ^uint64(0)},
	{^uint64(0), ^uint64(0), ^uint64(0), 0},
}

// feSamples returns the edge values plus n random raw values, a few of
// them biased towards all-ones limbs.
func feSamples(n int) []fe {
	r := rand.New(rand.NewPCG(1, 2))
	out := append([]fe(nil), feEdge...)
	for i := range n {
		var x fe
		for j := range x {
			x[j] = r.Uint64()
			if i%4 == 0 && r.IntN(2) == 0 {
				x[j] = ^uint64(0) - r.Uint64N(1<<34)
			}
		}
		out = append(out, x)
	}
	return out
}

func checkFe(t *testing.T, op string, got *fe, want *big.Int, in ...*fe) {
	t.Helper()
	ins := make([]fe, len(in))
	for i := range in {
		ins[i] = *in[i]
	}
	g := feBig(got)
	want = new(big.Int).Mod(want, bigP)
	if new(big.Int).Mod(g, bigP).Cmp(want) != 0 {
		t.Fatalf("%s%x = %x, want %x", op, ins, g, want)
	}
}

func TestFieldArithmetic(t *testing.T) {
	xs := feSamples(120)
	for i := range xs {
		x := &xs[i]
		bx := feBig(x)
		var z fe
		checkFe(t, "sqr", z.sqr(x), new(big.Int).Mul(bx, bx), x)
		checkFe(t, "neg", z.neg(x), new(big.Int).Neg(bx), x)
		checkFe(t, "half", z.half(x), new(big.Int).Mul(bx, new(big.Int).ModInverse(big.NewInt(2), bigP)), x)
		for j := range xs {
			y := &xs[j]
			by := feBig(y)
			checkFe(t, "mul", z.mul(x, y), new(big.Int).Mul(bx, by), x, y)
			checkFe(t, "add", z.add(x, y), new(big.Int).Add(bx, by), x, y)
			checkFe(t, "sub", z.sub(x, y), new(big.Int).Sub(bx, by), x, y)
			eq := new(big.Int).Mod(bx, bigP).Cmp(new(big.Int).Mod(by, bigP)) == 0
			if x.equal(y) != eq {
				t.Fatalf("equal(%x, %x) = %v", *x, *y, !eq)
			}
		}
		// Aliased operands.
		z = *x
		checkFe(t, "mul(z,z)", z.mul(&z, &z), new(big.Int).Mul(bx, bx), x)
		z = *x
		checkFe(t, "sub(z,z)", z.sub(&z, &z), new(big.Int), x)
	}
}

func TestFieldNormalizeBytes(t *testing.T) {
	for _, x := range feSamples(200) {
		want := new(big.Int).Mod(feBig(&x), bigP)
		var b [32]byte
		x.putBytes(&b)
		if new(big.Int).SetBytes(b[:]).Cmp(want) != 0 {
			t.Fatalf("putBytes(%x) = %x, want %x", x, b, want)
		}
		y := x
		y.normalize()
		if feBig(&y).Cmp(want) != 0 {
			t.Fatalf("normalize(%x) = %x", x, y)
		}
		if x.isOdd() != (want.Bit(0) == 1) || x.isZero() != (want.Sign() == 0) {
			t.Fatalf("isOdd/isZero(%x) wrong", x)
		}
		// setBytes of the raw big-endian value reports overflow iff >= p.
		feBig(&x).FillBytes(b[:])
		var z fe
		over := z.setBytes(&b)
		if over != (feBig(&x).Cmp(bigP) >= 0) || feBig(&z).Cmp(want) != 0 {
			t.Fatalf("setBytes(%x) = %x, %v", b, z, over)
		}
	}
}

func TestFieldInv(t *testing.T) {
	xs := feSamples(3000)
	for k := range 256 { // powers of two and p - 2^k stress the divstep shortcuts
		var x, y fe
		x[k/64] = 1 << (k % 64)
		y.sub(&y, &x)
		xs = append(xs, x, y)
	}
	for _, x := range xs {
		bx := new(big.Int).Mod(feBig(&x), bigP)
		var z fe
		z.inv(&x)
		if bx.Sign() == 0 {
			if !z.isZero() {
				t.Fatalf("inv(0) = %x", z)
			}
			continue
		}
		if feBig(&z).Cmp(bigP) >= 0 {
			t.Fatalf("inv(%x) = %x is not reduced", x, z)
		}
		checkFe(t, "inv", &z, new(big.Int).ModInverse(bx, bigP), &x)
	}
}

func TestFieldSqrt(t *testing.T) {
	for _, x := range feSamples(40) {
		bx := new(big.Int).Mod(feBig(&x), bigP)
		var z fe
		root := new(big.Int).ModSqrt(bx, bigP)
		ok := z.sqrt(&x)
		if ok != (root != nil) {
			t.Fatalf("sqrt(%x) ok = %v, want %v", x, ok, root != nil)
		}
		if ok {
			var sq fe
			checkFe(t, "sqrt^2", sq.sqr(&z), bx, &x)
		}
	}
}

func BenchmarkField(b *testing.B) {
	xs := feSamples(2)
	x, y := xs[len(xs)-1], xs[len(xs)-2]
	b.Run("mul", func(b *testing.B) {
		for range b.N {
			x.mul(&x, &y)
		}
	})
	b.Run("sqr", func(b *testing.B) {
		for range b.N {
			x.sqr(&x)
		}
	})
	b.Run("add", func(b *testing.B) {
		for range b.N {
			x.add(&x, &y)
		}
	})
	b.Run("inv", func(b *testing.B) {
		for range b.N {
			x.inv(&x)
		}
	})
}

func TestBackend(t *testing.T) {
	if b := Backend(); b != "go" {
		t.Fatalf("Backend() = %q in the default build", b)
	}
}
