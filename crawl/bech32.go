package crawl

import (
	"errors"
	"strings"
)

// bech32 decoding (BIP-173), just enough for NIP-19's nsec: a key pasted
// from a Nostr client. Its errors never quote the input, which is a
// secret.

const bech32Charset = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"

var bech32Rev = func() [128]int8 {
	var r [128]int8
	for i := range r {
		r[i] = -1
	}
	for i, c := range bech32Charset {
		r[c] = int8(i)
	}
	return r
}()

var errBech32 = errors.New("not valid bech32")

func bech32Polymod(values []byte) uint32 {
	gen := [5]uint32{0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3}
	chk := uint32(1)
	for _, v := range values {
		b := chk >> 25
		chk = (chk&0x1ffffff)<<5 ^ uint32(v)
		for i := range 5 {
			if (b>>i)&1 == 1 {
				chk ^= gen[i]
			}
		}
	}
	return chk
}

// bech32Decode returns the human-readable part and the data, converted
// from 5-bit groups to bytes, of a bech32 string with a valid checksum.
func bech32Decode(s string) (hrp string, data []byte, err error) {
	if len(s) > 90 {
		return "", nil, errBech32
	}
	lower, upper := strings.ToLower(s), strings.ToUpper(s)
	if s != lower && s != upper {
		return "", nil, errBech32 // mixed case
	}
	s = lower
	sep := strings.LastIndexByte(s, '1')
	if sep < 1 || sep+7 > len(s) {
		return "", nil, errBech32
	}
	hrp = s[:sep]
	values := make([]byte, 0, 2*len(hrp)+1+len(s)-sep-1)
	for i := 0; i < len(hrp); i++ {
		if hrp[i] < 33 || hrp[i] > 126 {
			return "", nil, errBech32
		}
		values = append(values, hrp[i]>>5)
	}
	values = append(values, 0)
	for i := 0; i < len(hrp); i++ {
		values = append(values, hrp[i]&31)
	}
	for i := sep + 1; i < len(s); i++ {
		c := s[i]
		if c >= 128 || bech32Rev[c] < 0 {
			return "", nil, errBech32
		}
		values = append(values, byte(bech32Rev[c]))
	}
	if bech32Polymod(values) != 1 {
		return "", nil, errors.New("bech32 checksum does not match (a typo?)")
	}
	five := values[2*len(hrp)+1 : len(values)-6]
	// 5-bit groups to bytes; leftover bits must be zero padding.
	var acc uint32
	bits := 0
	for _, v := range five {
		acc = acc<<5 | uint32(v)
		bits += 5
		if bits >= 8 {
			bits -= 8
			data = append(data, byte(acc>>bits))
		}
	}
	if bits >= 5 || acc&(1<<bits-1) != 0 {
		return "", nil, errBech32
	}
	return hrp, data, nil
}
