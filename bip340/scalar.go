//go:build !libsecp256k1

package bip340

import (
	"encoding/binary"
	"encoding/hex"
	"math/bits"

	secp "github.com/decred/dcrd/dcrec/secp256k1/v4"
)

// GLV endomorphism of secp256k1: λ·(x, y) = (β·x, y). A scalar k is split
// into k1 + k2·λ (mod n) with k1, k2 of about 128 bits, halving the
// doublings of a multiplication. The constants and the rounding trick are
// those of decred's (unexported) splitK in secp256k1/v4 curve.go.
var (
	endoBeta      = mustFe("7ae96a2b657c07106e64479eac3434e99cf0497512f58995c1396c28719501ee")
	endoNegLambda = mustScalar("5363ad4cc05c30e0a5261c028812645a122e22ea20816678df02967c1b23bd72", true)
	endoNegB1     = mustScalar("e4437ed6010e88286f547fa90abfe4c3", false)
	endoNegB2     = mustScalar("3086d221a7d46bcde86c90e49284eb15", true)
	endoZ1        = limbsOf(mustScalar("3086d221a7d46bcde86c90e49284eb153daa8a1471e8ca7f", false))
	endoZ2        = limbsOf(mustScalar("e4437ed6010e88286f547fa90abfe4c4221208ac9df506c6", false))
)

func mustBytes32(s string) *[32]byte {
	raw, err := hex.DecodeString(s)
	if err != nil || len(raw) > 32 {
		panic("bip340: bad constant " + s)
	}
	var b [32]byte
	copy(b[32-len(raw):], raw)
	return &b
}

func mustFe(s string) *fe {
	var f fe
	if f.setBytes(mustBytes32(s)) {
		panic("bip340: field constant out of range " + s)
	}
	return &f
}

func mustScalar(s string, negate bool) *secp.ModNScalar {
	var k secp.ModNScalar
	if k.SetBytes(mustBytes32(s)) != 0 {
		panic("bip340: scalar constant out of range " + s)
	}
	if negate {
		k.Negate()
	}
	return &k
}

// limbsOf returns k as little-endian 64-bit limbs.
func limbsOf(k *secp.ModNScalar) [4]uint64 {
	b := k.Bytes()
	return limbsBE(&b)
}

// limbsBE parses a big-endian 256-bit integer into little-endian limbs.
func limbsBE(b *[32]byte) [4]uint64 {
	return [4]uint64{
		binary.BigEndian.Uint64(b[24:]),
		binary.BigEndian.Uint64(b[16:]),
		binary.BigEndian.Uint64(b[8:]),
		binary.BigEndian.Uint64(b[0:]),
	}
}

// scalarOf returns l mod n as a scalar.
func scalarOf(l *[4]uint64) secp.ModNScalar {
	var b [32]byte
	binary.BigEndian.PutUint64(b[0:], l[3])
	binary.BigEndian.PutUint64(b[8:], l[2])
	binary.BigEndian.PutUint64(b[16:], l[1])
	binary.BigEndian.PutUint64(b[24:], l[0])
	var k secp.ModNScalar
	k.SetBytes(&b)
	return k
}

// mulShift320Round returns round(x*y / 2^320). It runs twice per
// verification, so a plain schoolbook loop will do.
func mulShift320Round(x, y *[4]uint64) [4]uint64 {
	var t [8]uint64
	for i := range 4 {
		var carry uint64
		for j := range 4 {
			hi, lo := bits.Mul64(x[i], y[j])
			var c uint64
			lo, c = bits.Add64(lo, t[i+j], 0)
			hi += c
			lo, c = bits.Add64(lo, carry, 0)
			hi += c
			t[i+j], carry = lo, hi
		}
		t[i+4] = carry
	}
	r0, c := bits.Add64(t[5], t[4]>>63, 0)
	r1, c := bits.Add64(t[6], 0, c)
	r2, _ := bits.Add64(t[7], 0, c)
	return [4]uint64{r0, r1, r2}
}

// glvSplit returns |k1|, |k2| and their signs such that
// k ≡ ±|k1| ± |k2|·λ (mod n), each magnitude about 128 bits.
func glvSplit(k *secp.ModNScalar) (k1, k2 [4]uint64, neg1, neg2 bool) {
	kl := limbsOf(k)
	c1l := mulShift320Round(&kl, &endoZ1)
	c2l := mulShift320Round(&kl, &endoZ2)
	c1, c2 := scalarOf(&c1l), scalarOf(&c2l)
	var s1, s2 secp.ModNScalar
	s2.Add2(c1.Mul(endoNegB1), c2.Mul(endoNegB2)) // k2 = c1*(-b1) + c2*(-b2)
	s1.Mul2(&s2, endoNegLambda).Add(k)            // k1 = k - k2*λ
	if neg1 = s1.IsOverHalfOrder(); neg1 {
		s1.Negate()
	}
	if neg2 = s2.IsOverHalfOrder(); neg2 {
		s2.Negate()
	}
	return limbsOf(&s1), limbsOf(&s2), neg1, neg2
}

// wnafLen is the most digits a width-w NAF of a 256-bit integer needs.
const wnafLen = 257

// wnaf writes the width-w non-adjacent form of k into d, which must be
// zero: d[i] multiplies 2^i, every nonzero digit is odd with
// |d[i]| < 2^(w-1), and at least w-1 zeros separate nonzero digits. Digits
// are negated if neg. It returns the number of digits (the highest nonzero
// one plus one). w must be in [2, 16].
func wnaf(d *[wnafLen]int16, k *[4]uint64, w uint, neg bool) int {
	// Walk k from the bottom: skip its trailing zeros, take the low w bits
	// as a signed odd digit v, subtract v (which zeroes those w bits, with
	// a carry up when v < 0) and skip the w bits. x[4] catches that carry.
	x := [5]uint64{k[0], k[1], k[2], k[3]}
	mask := uint64(1)<<w - 1
	pos, n := uint(0), 0
	for x != [5]uint64{} {
		for x[0] == 0 {
			x = [5]uint64{x[1], x[2], x[3], x[4]}
			pos += 64
		}
		tz := uint(bits.TrailingZeros64(x[0]))
		shiftRight(&x, tz)
		pos += tz
		word := x[0] & mask
		v := int64(word)
		if word>>(w-1) != 0 {
			v -= int64(mask) + 1
			// x - v = x + (2^w - word): clear the low bits and carry 2^w.
			var c uint64
			x[0], c = bits.Add64(x[0]&^mask, mask+1, 0)
			x[1], c = bits.Add64(x[1], 0, c)
			x[2], c = bits.Add64(x[2], 0, c)
			x[3], c = bits.Add64(x[3], 0, c)
			x[4] += c
		} else {
			x[0] &^= mask
		}
		if neg {
			v = -v
		}
		d[pos] = int16(v)
		n = int(pos) + 1
		shiftRight(&x, w)
		pos += w
	}
	return n
}

// shiftRight shifts x right by s < 64 bits.
func shiftRight(x *[5]uint64, s uint) {
	if s == 0 {
		return
	}
	x[0] = x[0]>>s | x[1]<<(64-s)
	x[1] = x[1]>>s | x[2]<<(64-s)
	x[2] = x[2]>>s | x[3]<<(64-s)
	x[3] = x[3]>>s | x[4]<<(64-s)
	x[4] >>= s
}
