//go:build !libsecp256k1

package bip340

import (
	"math/big"
	"math/rand/v2"
	"testing"

	secp "github.com/decred/dcrd/dcrec/secp256k1/v4"
)

var bigN, _ = new(big.Int).SetString("fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141", 16)

func limbsBig(l *[4]uint64) *big.Int {
	var b [32]byte
	for i := range 4 {
		for j := range 8 {
			b[31-8*i-j] = byte(l[i] >> (8 * j))
		}
	}
	return new(big.Int).SetBytes(b[:])
}

func bigLimbs(x *big.Int) [4]uint64 {
	var b [32]byte
	x.FillBytes(b[:])
	return limbsBE(&b)
}

// scalarSamples returns edge scalars (0, 1, n-1, n/2 ± 1, λ, 2^128 ± 1)
// and n random ones below n.
func scalarSamples(n int) []*big.Int {
	r := rand.New(rand.NewPCG(5, 6))
	half := new(big.Int).Rsh(bigN, 1)
	two128 := new(big.Int).Lsh(big.NewInt(1), 128)
	lambda := limbsOf(endoNegLambda)
	out := []*big.Int{
		big.NewInt(0), big.NewInt(1), big.NewInt(2),
		new(big.Int).Sub(bigN, big.NewInt(1)),
		half, new(big.Int).Add(half, big.NewInt(1)),
		new(big.Int).Sub(bigN, limbsBig(&lambda)),
		two128, new(big.Int).Sub(two128, big.NewInt(1)), new(big.Int).Add(two128, big.NewInt(1)),
	}
	for range n {
		var l [4]uint64
		for j := range l {
			l[j] = r.Uint64()
		}
		out = append(out, new(big.Int).Mod(limbsBig(&l), bigN))
	}
	return out
}

func TestWNAF(t *testing.T) {
	all1 := [4]uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}
	ks := []*big.Int{limbsBig(&all1), new(big.Int).Lsh(big.NewInt(1), 255)}
	ks = append(ks, scalarSamples(50)...)
	for _, w := range []uint{2, 5, 6, 12, 16} {
		for _, kb := range ks {
			for _, neg := range []bool{false, true} {
				k := bigLimbs(kb)
				var d [wnafLen]int16
				n := wnaf(&d, &k, w, neg)
				sum := new(big.Int)
				last := -int(w)
				for i := wnafLen - 1; i >= 0; i-- {
					sum.Lsh(sum, 1).Add(sum, big.NewInt(int64(d[i])))
				}
				for i, v := range d {
					if v == 0 {
						continue
					}
					if v%2 == 0 || int(v) >= 1<<(w-1) || int(v) <= -(1<<(w-1)) || i-last < int(w) || i >= n {
						t.Fatalf("w=%d k=%x: digit %d at %d (previous at %d, n=%d)", w, kb, v, i, last, n)
					}
					last = i
				}
				if n != last+1 && !(n == 0 && last < 0) {
					t.Fatalf("w=%d k=%x: n=%d, highest digit at %d", w, kb, n, last)
				}
				if neg {
					sum.Neg(sum)
				}
				if sum.Cmp(kb) != 0 {
					t.Fatalf("w=%d k=%x neg=%v: digits sum to %x", w, kb, neg, sum)
				}
			}
		}
	}
}

func TestGLVSplit(t *testing.T) {
	lambda := new(big.Int).Sub(bigN, func() *big.Int { l := limbsOf(endoNegLambda); return limbsBig(&l) }())
	bound := new(big.Int).Lsh(big.NewInt(1), 129)
	for _, kb := range scalarSamples(300) {
		k := scalarOf(ptr(bigLimbs(kb)))
		k1, k2, neg1, neg2 := glvSplit(&k)
		a, b := limbsBig(&k1), limbsBig(&k2)
		if a.Cmp(bound) >= 0 || b.Cmp(bound) >= 0 {
			t.Fatalf("k=%x: halves %x, %x exceed 2^129", kb, a, b)
		}
		if neg1 {
			a.Neg(a)
		}
		if neg2 {
			b.Neg(b)
		}
		got := new(big.Int).Mul(b, lambda)
		got.Add(got, a).Mod(got, bigN)
		if got.Cmp(kb) != 0 {
			t.Fatalf("k=%x: k1 + k2·λ = %x", kb, got)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestLambdaBeta checks that the GLV constants agree: λ·G = (β·Gx, Gy).
func TestLambdaBeta(t *testing.T) {
	var lambda secp.ModNScalar
	lambda.NegateVal(endoNegLambda)
	var lg secp.JacobianPoint
	secp.ScalarBaseMultNonConst(&lambda, &lg)
	lg.ToAffine()
	g := &gTables().g[0]
	var bx fe
	bx.mul(&g.x, endoBeta)
	if !sameFe(&bx, &lg.X) || !sameFe(&g.y, &lg.Y) {
		t.Fatalf("λ·G = (%v, %v), want (β·Gx, Gy)", lg.X, lg.Y)
	}
}

// sameFe compares a fe with a decred field value.
func sameFe(a *fe, b *secp.FieldVal) bool {
	var ab [32]byte
	a.putBytes(&ab)
	c := *b
	c.Normalize()
	return ab == *c.Bytes()
}
