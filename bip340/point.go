//go:build !libsecp256k1

package bip340

// aff is a finite curve point in affine coordinates.
type aff struct{ x, y fe }

// jac is a curve point in Jacobian coordinates, (x/z^2, y/z^3); inf marks
// the point at infinity (the other fields are then meaningless).
type jac struct {
	x, y, z fe
	inf     bool
}

// setAff sets p to the affine point a.
func (p *jac) setAff(a *aff) {
	p.x, p.y = a.x, a.y
	p.z = fe{1}
	p.inf = false
}

// double sets p = 2q with libsecp256k1's formula (3M+4S, and fewer
// additions than dbl-2009-l's 2M+5S, which matters as additions are not
// free with 64-bit limbs):
//
//	L = 3/2·X1^2, S = Y1^2, T = X1·S
//	X3 = L^2 - 2T, Y3 = L·(T - X3) - S^2, Z3 = Y1·Z1
//
// secp256k1 has no point of order 2, so doubling a finite point never
// yields infinity.
func (p *jac) double(q *jac) {
	if q.inf {
		p.inf = true
		return
	}
	var l, s, t fe
	l.sqr(&q.x)
	t.add(&l, &l)
	l.add(&l, &t).half(&l)                  // L = 3/2·X1^2
	s.sqr(&q.y)                             // S = Y1^2
	t.mul(&q.x, &s)                         // T = X1·S
	p.z.mul(&q.y, &q.z)                     // Z3 = Y1·Z1 (q.y, q.z are dead after)
	s.sqr(&s)                               // S^2
	p.x.sqr(&l).sub(&p.x, &t).sub(&p.x, &t) // X3 = L^2 - 2T
	t.sub(&t, &p.x)                         // T - X3
	p.y.mul(&l, &t).sub(&p.y, &s)           // Y3 = L·(T - X3) - S^2
	p.inf = false
}

// addAff sets p = q + a for affine a (madd, 8M+3S), handling q = ±a and
// infinity exactly, since a forged signature may steer into those cases.
func (p *jac) addAff(q *jac, a *aff) {
	if q.inf {
		p.setAff(a)
		return
	}
	var z1z1, u2, s2, h, r fe
	z1z1.sqr(&q.z)      // Z1Z1 = Z1^2
	u2.mul(&a.x, &z1z1) // U2 = X2*Z1Z1
	s2.mul(&a.y, &q.z)  // Y2*Z1
	s2.mul(&s2, &z1z1)  // S2 = Y2*Z1*Z1Z1
	h.sub(&u2, &q.x)    // H = U2-X1
	r.sub(&s2, &q.y)    // r = S2-Y1
	if h.isZero() {
		if r.isZero() {
			p.double(q)
		} else {
			p.inf = true
		}
		return
	}
	var hh, hhh, v, t fe
	hh.sqr(&h)                      // HH = H^2
	hhh.mul(&h, &hh)                // HHH = H*HH
	v.mul(&q.x, &hh)                // V = X1*HH
	p.z.mul(&q.z, &h)               // Z3 = Z1*H
	t.mul(&q.y, &hhh)               // Y1*HHH (before p.y may overwrite q.y)
	p.x.sqr(&r).sub(&p.x, &hhh)     // r^2-HHH
	p.x.sub(&p.x, &v).sub(&p.x, &v) // X3 = r^2-HHH-2*V
	v.sub(&v, &p.x)                 // V-X3
	p.y.mul(&r, &v).sub(&p.y, &t)   // Y3 = r*(V-X3)-Y1*HHH
	p.inf = false
}

// add sets p = q + o for Jacobian o (add-1998-cmo-2, 12M+4S). Used only to
// build tables; the hot loop adds affine points.
func (p *jac) add(q, o *jac) {
	switch {
	case q.inf:
		*p = *o
		return
	case o.inf:
		*p = *q
		return
	}
	var z1z1, z2z2, u1, u2, s1, s2, h, r fe
	z1z1.sqr(&q.z)
	z2z2.sqr(&o.z)
	u1.mul(&q.x, &z2z2)
	u2.mul(&o.x, &z1z1)
	s1.mul(&q.y, &o.z).mul(&s1, &z2z2)
	s2.mul(&o.y, &q.z).mul(&s2, &z1z1)
	h.sub(&u2, &u1)
	r.sub(&s2, &s1)
	if h.isZero() {
		if r.isZero() {
			p.double(q)
		} else {
			p.inf = true
		}
		return
	}
	var hh, hhh, v, t fe
	hh.sqr(&h)
	hhh.mul(&h, &hh)
	v.mul(&u1, &hh)
	p.z.mul(&q.z, &o.z).mul(&p.z, &h)
	t.mul(&s1, &hhh)
	p.x.sqr(&r).sub(&p.x, &hhh)
	p.x.sub(&p.x, &v).sub(&p.x, &v)
	v.sub(&v, &p.x)
	p.y.mul(&r, &v).sub(&p.y, &t)
	p.inf = false
}

// sub sets p = q - o.
func (p *jac) sub(q, o *jac) {
	n := *o
	n.y.neg(&n.y)
	p.add(q, &n)
}

// oddMultiples fills dst with P, 3P, 5P, ... in affine coordinates, using
// one field inversion for the whole table (Montgomery's trick); js is
// scratch of the same length, so callers choose where it lives. p must be
// finite and of prime order, so no multiple below the group order is
// infinity.
func oddMultiples(dst []aff, js []jac, p *aff) {
	oddMultiplesJac(js, p)
	toAffine(dst, js)
}

// oddMultiplesJac fills js with P, 3P, 5P, ... in Jacobian coordinates,
// for callers that convert many tables with one toAffine.
func oddMultiplesJac(js []jac, p *aff) {
	var p2 jac
	js[0].setAff(p)
	p2.double(&js[0])
	for i := 1; i < len(js); i++ {
		js[i].add(&js[i-1], &p2)
	}
}

// toAffine converts finite Jacobian points to affine with one inversion.
func toAffine(dst []aff, src []jac) {
	// dst[i].x first holds z_0 * ... * z_i; invert the full product, then
	// peel one z off at a time from the end.
	dst[0].x = src[0].z
	for i := 1; i < len(src); i++ {
		dst[i].x.mul(&dst[i-1].x, &src[i].z)
	}
	var inv, zi, zi2 fe
	inv.inv(&dst[len(src)-1].x)
	for i := len(src) - 1; i >= 0; i-- {
		if i > 0 {
			zi.mul(&inv, &dst[i-1].x) // 1/z_i
			inv.mul(&inv, &src[i].z)
		} else {
			zi = inv
		}
		zi2.sqr(&zi)
		dst[i].x.mul(&src[i].x, &zi2)
		dst[i].y.mul(&src[i].y, zi2.mul(&zi2, &zi))
		dst[i].x.normalize()
		dst[i].y.normalize()
	}
}
