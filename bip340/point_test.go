//go:build !libsecp256k1

package bip340

import (
	"crypto/sha256"
	"fmt"
	"math/big"
	"testing"

	secp "github.com/decred/dcrd/dcrec/secp256k1/v4"
)

// decredPoint converts an affine point to decred's type.
func decredPoint(a *aff) secp.JacobianPoint {
	var xb, yb [32]byte
	a.x.putBytes(&xb)
	a.y.putBytes(&yb)
	var p secp.JacobianPoint
	p.X.SetBytes(&xb)
	p.Y.SetBytes(&yb)
	p.Z.SetInt(1)
	return p
}

// sameJac reports whether our point and decred's are the same point.
func sameJac(p *jac, q *secp.JacobianPoint) bool {
	qInf := (q.X.IsZero() && q.Y.IsZero()) || q.Z.IsZero()
	if p.inf || qInf {
		return p.inf == qInf
	}
	var a [1]aff
	toAffine(a[:], []jac{*p})
	r := *q
	r.ToAffine()
	return sameFe(&a[0].x, &r.X) && sameFe(&a[0].y, &r.Y)
}

// TestEcmult compares ecmult (s·G + k·P) with decred's separate scalar
// multiplications, including the cases where the accumulator meets a
// table point (doubling inside an addition) or its negation (infinity).
func TestEcmult(t *testing.T) {
	g := &gTables().g[0]
	var gx [32]byte
	g.x.putBytes(&gx)
	nm1 := new(big.Int).Sub(bigN, big.NewInt(1))
	two128 := new(big.Int).Lsh(big.NewInt(1), 128)

	type tc struct {
		key  [32]byte
		k, s *big.Int
	}
	cases := []tc{
		{gx, big.NewInt(1), big.NewInt(1)},                         // G + G: doubling inside addAff
		{gx, nm1, big.NewInt(1)},                                   // -G + G: infinity
		{gx, big.NewInt(1), nm1},                                   // G - G
		{gx, big.NewInt(0), big.NewInt(0)},                         // infinity throughout
		{gx, big.NewInt(3), big.NewInt(5)},                         // 3G + 5G: meets table points
		{gx, nm1, two128},                                          // s only in the high half
		{gx, big.NewInt(0), nm1},                                   // no key digits
		{gx, nm1, big.NewInt(0)},                                   // no base digits
		{gx, new(big.Int).Sub(bigN, big.NewInt(7)), big.NewInt(7)}, // infinity late
	}
	ks := scalarSamples(40)
	for i := range 40 {
		var key [32]byte
		for j := 0; ; j++ {
			key = sha256.Sum256(fmt.Appendf(nil, "ecmult key %d/%d", i, j))
			var pk pubKey
			if parsePubKey(&pk, &key) == nil {
				break
			}
		}
		cases = append(cases, tc{key, ks[i], ks[len(ks)-1-i]})
	}

	for _, c := range cases {
		var pk pubKey
		if err := parsePubKey(&pk, &c.key); err != nil {
			t.Fatal(err)
		}
		k, s := scalarOf(ptr(bigLimbs(c.k))), bigLimbs(c.s)
		var got jac
		ecmult(&got, &pk.table, &k, &s)

		P := decredPoint(&pk.table[0])
		ss := scalarOf(&s)
		var kP, sG, want secp.JacobianPoint
		secp.ScalarMultNonConst(&k, &P, &kP)
		secp.ScalarBaseMultNonConst(&ss, &sG)
		secp.AddNonConst(&kP, &sG, &want)
		if !sameJac(&got, &want) {
			t.Fatalf("key %x k=%x s=%x: ecmult differs from decred", c.key, c.k, c.s)
		}

		// The table holds P, 3P, 5P, ...
		for j := range pk.table {
			var m secp.ModNScalar
			m.SetInt(uint32(2*j + 1))
			var jp secp.JacobianPoint
			secp.ScalarMultNonConst(&m, &P, &jp)
			var e jac
			e.setAff(&pk.table[j])
			if !sameJac(&e, &jp) {
				t.Fatalf("key %x: table[%d] is not %d·P", c.key, j, 2*j+1)
			}
		}
	}
}

// TestPointAdd covers jac.add's special cases, which table building never
// meets: infinity operands, equal points in different coordinates
// (doubling) and opposite points (infinity).
func TestPointAdd(t *testing.T) {
	g := gTables().g[:3] // G, 3G, 5G
	var p3, p3z, neg3, two jac
	p3.setAff(&g[1])
	// 3G = 2G + G with a Z other than 1.
	two.setAff(&g[0])
	two.double(&two)
	p3z.addAff(&two, &g[0])
	neg3 = p3z
	neg3.y.neg(&neg3.y)
	inf := jac{inf: true}
	var six secp.ModNScalar
	six.SetInt(6)
	var sixG, threeG secp.JacobianPoint
	secp.ScalarBaseMultNonConst(&six, &sixG)
	threeG = decredPoint(&g[1])
	infG := secp.JacobianPoint{}

	for _, c := range []struct {
		name string
		q, o *jac
		want *secp.JacobianPoint
	}{
		{"inf+P", &inf, &p3, &threeG},
		{"P+inf", &p3z, &inf, &threeG},
		{"P+P", &p3, &p3z, &sixG},
		{"P-P", &p3, &neg3, &infG},
	} {
		var got jac
		got.add(c.q, c.o)
		if !sameJac(&got, c.want) {
			t.Errorf("%s: wrong result", c.name)
		}
	}
}
