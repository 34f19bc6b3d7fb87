//go:build !libsecp256k1

package bip340

import (
	"sync"

	secp "github.com/decred/dcrd/dcrec/secp256k1/v4"
)

// backend is the pure-Go implementation the package comment describes.
const backend = "go"

// Window widths of the NAF digits. Wider windows mean fewer additions but
// bigger tables: the per-key table holds 2^(windowP-2) points (cached per
// author, so it is kept small), the static G tables 2^(windowG-2) each.
const (
	windowP = 5
	windowG = 12
)

// pubKey is a lifted x-only key ready for verification: the odd multiples
// P, 3P, ..., of the even-y point P in affine coordinates. It is immutable
// once parsed, so a KeyCache shares it between goroutines.
type pubKey struct {
	table [tableP]aff
}

// tableP is the size of a key's table.
const tableP = 1 << (windowP - 2)

// pubKeySize is the memory one cached pubKey holds, for KeyCache docs.
const pubKeySize = tableP * 64

var feSeven = fe{7}

// parsePubKey lifts the x-only key b (BIP-340 lift_x) into pk.
func parsePubKey(pk *pubKey, b *[32]byte) error {
	var p aff
	if err := liftKey(&p, b); err != nil {
		return err
	}
	var scratch [len(pk.table)]jac
	oddMultiples(pk.table[:], scratch[:], &p)
	return nil
}

// liftKey sets p to the even-y point with x coordinate b, or reports why
// b is not a valid x-only key.
func liftKey(p *aff, b *[32]byte) error {
	if p.x.setBytes(b) {
		return errPubKeyRange
	}
	if !p.liftX() {
		return errPubKeyNotOnCurve
	}
	return nil
}

// liftX sets p.y to the even square root of p.x^3 + 7 (BIP-340 lift_x for
// p.x < p) and reports whether there is one.
func (p *aff) liftX() bool {
	var rhs fe
	rhs.sqr(&p.x).mul(&rhs, &p.x).add(&rhs, &feSeven)
	if !p.y.sqrt(&rhs) {
		return false
	}
	if p.y.isOdd() {
		p.y.neg(&p.y)
	}
	return true
}

// gTable holds the odd multiples of G and of 2^128·G; s is split into
// 128-bit halves against them, so its digits share the doublings of the
// key's GLV halves.
type gTable struct{ g, h [1 << (windowG - 2)]aff }

// gTables builds the tables on first use (about 1 ms), not at init, so
// programs that import the package without verifying do not pay for it.
var gTables = sync.OnceValue(func() *gTable {
	t := new(gTable)
	var g aff
	g.x = *mustFe("79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798")
	g.y = *mustFe("483ada7726a3c4655da4fbfc0e1108a8fd17b448a68554199c47d08ffb10d4b8")
	var hj jac
	hj.setAff(&g)
	for range 128 {
		hj.double(&hj)
	}
	var h [1]aff
	toAffine(h[:], []jac{hj})
	scratch := make([]jac, len(t.g))
	oddMultiples(t.g[:], scratch, &g)
	oddMultiples(t.h[:], scratch, &h[0])
	return t
})

// verifyParsed checks sig over msg against the parsed key pk, whose
// serialization pubkey enters the challenge.
func verifyParsed(pk *pubKey, pubkey *[32]byte, msg []byte, sig *[64]byte) error {
	if err := checkSigRange(sig); err != nil {
		return err
	}
	var r fe
	r.setBytes((*[32]byte)(sig[:32]))
	sl := limbsBE((*[32]byte)(sig[32:]))

	var e secp.ModNScalar
	h := challenge(sig[:32], pubkey, msg)
	e.SetBytes(&h)
	e.Negate()

	var acc jac
	ecmult(&acc, &pk.table, &e, &sl)
	if acc.inf {
		return ErrInvalidSignature
	}

	// x(R) == r is checked projectively (X == r·Z^2), so most forgeries
	// are rejected without the inversion that the parity of y needs.
	var z2, t fe
	z2.sqr(&acc.z)
	if !t.mul(&r, &z2).equal(&acc.x) {
		return ErrInvalidSignature
	}
	var zi, y fe
	zi.inv(&acc.z)
	y.sqr(&zi).mul(&y, &zi).mul(&y, &acc.y)
	if y.isOdd() {
		return ErrInvalidSignature
	}
	return nil
}

// ecmult sets acc = s·G + k·P, tab being P's table, in one Strauss chain
// of about 129 doublings: k is split by GLV into k1·P + k2·λP and s into
// its 128-bit halves against G and 2^128·G.
func ecmult(acc *jac, tab *[tableP]aff, k *secp.ModNScalar, s *[4]uint64) {
	k1, k2, neg1, neg2 := glvSplit(k)
	sLo, sHi := [4]uint64{s[0], s[1]}, [4]uint64{s[2], s[3]}
	var d1, d2, d3, d4 [wnafLen]int16
	n1 := wnaf(&d1, &k1, windowP, neg1)
	n2 := wnaf(&d2, &k2, windowP, neg2)
	n3 := wnaf(&d3, &sLo, windowG, false)
	n4 := wnaf(&d4, &sHi, windowG, false)

	// λP's table is P's with x scaled by β.
	var lam [tableP]aff
	for i := range lam {
		lam[i].x.mul(&tab[i].x, endoBeta)
		lam[i].y = tab[i].y
	}

	g := gTables()
	acc.inf = true
	for i := max(n1, n2, n3, n4) - 1; i >= 0; i-- {
		acc.double(acc)
		if i < n1 && d1[i] != 0 {
			addDigit(acc, tab[:], d1[i])
		}
		if i < n2 && d2[i] != 0 {
			addDigit(acc, lam[:], d2[i])
		}
		if i < n3 && d3[i] != 0 {
			addDigit(acc, g.g[:], d3[i])
		}
		if i < n4 && d4[i] != 0 {
			addDigit(acc, g.h[:], d4[i])
		}
	}
}

// addDigit adds d·T to acc, where table holds T, 3T, 5T, ... and d is a
// nonzero odd NAF digit.
func addDigit(acc *jac, table []aff, d int16) {
	if d > 0 {
		acc.addAff(acc, &table[d>>1])
		return
	}
	a := table[(-d)>>1]
	a.y.neg(&a.y)
	acc.addAff(acc, &a)
}
