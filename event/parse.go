package event

import (
	"bytes"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// Parse decodes one event object as a relay sent it: any key order, any
// whitespace, any JSON escapes. It is strict where leniency would let two
// readers disagree about the event: duplicate keys, missing keys, ids and
// keys that are not 64/128 lowercase hex, non-integer numbers, invalid
// UTF-8, and trailing bytes are all errors wrapping ErrMalformed. Unknown
// keys are ignored (they are not part of the id) but their values must be
// valid JSON.
//
// Strings decode byte for byte as encoding/json decodes them (an unpaired
// surrogate escape becomes U+FFFD), because the id is recomputed from
// them. Content and all tag items share one allocation.
func Parse(raw []byte) (*Event, error) {
	if !utf8.Valid(raw) {
		return nil, fmt.Errorf("%w: invalid UTF-8", ErrMalformed)
	}
	p := parser{in: raw}
	e := new(Event)
	if err := p.event(e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return e, nil
}

// fieldNames are the NIP-01 keys; a key's index is its bit in the set of
// keys seen.
var fieldNames = [...]string{"id", "pubkey", "created_at", "kind", "tags", "content", "sig"}

const (
	fieldID = iota
	fieldPubKey
	fieldCreatedAt
	fieldKind
	fieldTags
	fieldContent
	fieldSig
	fieldUnknown
)

const allFields = 1<<fieldUnknown - 1

func missing(seen uint8) string {
	var out []byte
	for i, n := range fieldNames {
		if seen&(1<<i) == 0 {
			if len(out) > 0 {
				out = append(out, ',')
			}
			out = append(out, n...)
		}
	}
	return string(out)
}

// maxDepth is encoding/json's nesting limit for one value. The decoder
// Parse replaced read each value of an unknown key with that limit, so
// such a value may nest this deep and no deeper.
const maxDepth = 10000

// parser is a single forward pass over one event object.
type parser struct {
	in  []byte
	pos int
	// strs holds the decoded content and tag items back to back. It is
	// only ever appended to, never overwritten, so text() may hand out
	// its bytes as strings, as strings.Builder does.
	strs []byte
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf(format+" at offset %d", append(args, p.pos)...)
}

func (p *parser) event(e *Event) error {
	p.skipSpace()
	if !p.eat('{') {
		return p.errorf("not a JSON object")
	}
	var seen uint8
	p.skipSpace()
	if !p.eat('}') {
		for {
			f, err := p.key()
			if err != nil {
				return err
			}
			p.skipSpace()
			if !p.eat(':') {
				return p.errorf("expected ':' after object key")
			}
			p.skipSpace()
			switch f {
			case fieldID:
				err = p.hexString(e.ID[:])
			case fieldPubKey:
				err = p.hexString(e.PubKey[:])
			case fieldSig:
				err = p.hexString(e.Sig[:])
			case fieldCreatedAt:
				e.CreatedAt, err = p.integer(1 << 53)
			case fieldKind:
				var k int64
				k, err = p.integer(65535)
				e.Kind = int(k)
			case fieldTags:
				e.Tags, err = p.tags()
			case fieldContent:
				e.Content, err = p.keptString()
			default:
				err = p.skipValue()
			}
			if f == fieldUnknown {
				if err != nil {
					return fmt.Errorf("unknown key: %w", err)
				}
			} else {
				if err != nil {
					return fmt.Errorf("field %q: %w", fieldNames[f], err)
				}
				if seen&(1<<f) != 0 {
					return fmt.Errorf("duplicate key %q", fieldNames[f])
				}
				seen |= 1 << f
			}
			p.skipSpace()
			if p.eat(',') {
				p.skipSpace()
				continue
			}
			if p.eat('}') {
				break
			}
			return p.errorf("expected ',' or '}' after object value")
		}
	}
	p.skipSpace()
	if p.pos != len(p.in) {
		return p.errorf("trailing data after object")
	}
	if seen != allFields {
		return fmt.Errorf("missing %s", missing(seen))
	}
	return nil
}

func (p *parser) skipSpace() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\r', '\n':
			p.pos++
		default:
			return
		}
	}
}

// eat consumes c if it is the next byte.
func (p *parser) eat(c byte) bool {
	if p.pos < len(p.in) && p.in[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

// key reads an object key and returns which field it names. Keys are
// compared after unescaping, so "\u0069d" is "id".
func (p *parser) key() (int, error) {
	lo, hi, esc, err := p.str()
	if err != nil {
		return 0, err
	}
	k := p.in[lo:hi]
	if esc {
		var buf [64]byte
		k = appendUnescaped(buf[:0], k)
	}
	switch string(k) {
	case "id":
		return fieldID, nil
	case "pubkey":
		return fieldPubKey, nil
	case "created_at":
		return fieldCreatedAt, nil
	case "kind":
		return fieldKind, nil
	case "tags":
		return fieldTags, nil
	case "content":
		return fieldContent, nil
	case "sig":
		return fieldSig, nil
	}
	return fieldUnknown, nil
}

// strPlain[c] reports whether byte c stands for itself inside a JSON
// string. Bytes >= 0x80 do: the input as a whole is valid UTF-8.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < len(t); c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads a JSON string, validating it as encoding/json's scanner does,
// and returns the bounds of its undecoded body and whether it has escapes.
func (p *parser) str() (lo, hi int, esc bool, err error) {
	in := p.in
	if p.pos >= len(in) || in[p.pos] != '"' {
		return 0, 0, false, p.errorf("expected string")
	}
	lo = p.pos + 1
	i := lo
	for {
		for i < len(in) && strPlain[in[i]] {
			i++
		}
		if i == len(in) {
			p.pos = i
			return 0, 0, false, p.errorf("unterminated string")
		}
		switch c := in[i]; c {
		case '"':
			p.pos = i + 1
			return lo, i, esc, nil
		case '\\':
			n := escapeLen(in[i:])
			if n == 0 {
				p.pos = i
				return 0, 0, false, p.errorf("invalid escape in string")
			}
			esc = true
			i += n
		default:
			p.pos = i
			return 0, 0, false, p.errorf("control character %#x in string", c)
		}
	}
}

// escapeLen returns the length of the escape sequence at the start of s
// (which begins with a backslash), or 0 if it is not a JSON escape.
func escapeLen(s []byte) int {
	if len(s) < 2 {
		return 0
	}
	switch s[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		if len(s) >= 6 && hex4(s[2:6]) >= 0 {
			return 6
		}
	}
	return 0
}

// hex4 decodes four hex digits of either case, or returns -1.
func hex4(s []byte) rune {
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// appendUnescaped appends the decoded body s of a string that str has
// validated, exactly as encoding/json decodes it: a surrogate escape
// followed by its pair is one rune, any other surrogate escape is U+FFFD.
// The result is never longer than s.
func appendUnescaped(dst, s []byte) []byte {
	for {
		i := bytes.IndexByte(s, '\\')
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		s = s[i:]
		c := s[1]
		switch c {
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		case 'u':
			r := hex4(s[2:6])
			s = s[6:]
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if len(s) >= 6 && s[0] == '\\' && s[1] == 'u' {
					r2 = hex4(s[2:6])
				}
				r = utf16.DecodeRune(r, r2)
				if r != utf8.RuneError {
					s = s[6:]
				}
			}
			dst = utf8.AppendRune(dst, r)
			continue
		}
		dst = append(dst, c)
		s = s[2:]
	}
}

// hexString decodes a string value holding exactly 2*len(dst) lowercase
// hex digits.
func (p *parser) hexString(dst []byte) error {
	// Fast path: the digits spelled plainly, as every relay does.
	if end := p.pos + 2*len(dst) + 1; end < len(p.in) && p.in[p.pos] == '"' && p.in[end] == '"' &&
		decodeLowerHex(dst, p.in[p.pos+1:end]) == nil {
		p.pos = end + 1
		return nil
	}
	if p.pos < len(p.in) && p.in[p.pos] != '"' {
		return p.errorf("not a string")
	}
	lo, hi, esc, err := p.str()
	if err != nil {
		return err
	}
	s := p.in[lo:hi]
	if esc {
		var buf [128]byte
		s = appendUnescaped(buf[:0], s)
	}
	return decodeLowerHex(dst, s)
}

// integer reads a number that must be a plain integer in [0, max]: no
// fraction or exponent ("1.0", "1e3" are refused) and "-0" is 0, as the
// strconv.ParseInt check of the replaced decoder had it.
func (p *parser) integer(max int64) (int64, error) {
	lo := p.pos
	if err := p.skipNumber(); err != nil {
		return 0, err
	}
	s := p.in[lo:p.pos]
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	var v int64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("not an integer: %.20s", p.in[lo:p.pos])
		}
		if v <= max { // stop accumulating before it could overflow
			v = v*10 + int64(c-'0')
		}
	}
	if v > max || (neg && v != 0) {
		return 0, fmt.Errorf("%.20s out of range [0,%d]", p.in[lo:p.pos], max)
	}
	return v, nil
}

// skipNumber steps over a number in the full JSON grammar.
func (p *parser) skipNumber() error {
	in, i := p.in, p.pos
	if i < len(in) && in[i] == '-' {
		i++
	}
	switch {
	case i < len(in) && in[i] == '0':
		i++
	case i < len(in) && in[i] >= '1' && in[i] <= '9':
		i = skipDigits(in, i)
	default:
		p.pos = i
		return p.errorf("invalid value")
	}
	if i < len(in) && in[i] == '.' {
		j := skipDigits(in, i+1)
		if j == i+1 {
			p.pos = j
			return p.errorf("no digits after decimal point")
		}
		i = j
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		j := skipDigits(in, i)
		if j == i {
			p.pos = j
			return p.errorf("no digits in exponent")
		}
		i = j
	}
	p.pos = i
	return nil
}

func skipDigits(in []byte, i int) int {
	for i < len(in) && in[i] >= '0' && in[i] <= '9' {
		i++
	}
	return i
}

// keptString reads a string value (null is refused) into p.strs.
func (p *parser) keptString() (string, error) {
	lo, hi, err := p.keep()
	if err != nil {
		return "", err
	}
	return p.text()[lo:hi], nil
}

// keep decodes a string value onto p.strs and returns its bounds there.
func (p *parser) keep() (lo, hi int, err error) {
	if p.pos < len(p.in) && p.in[p.pos] != '"' {
		return 0, 0, p.errorf("not a string")
	}
	slo, shi, esc, err := p.str()
	if err != nil {
		return 0, 0, err
	}
	if p.strs == nil && shi > slo {
		// Decoding never lengthens, so everything kept from here on fits
		// and p.strs is allocated once.
		p.strs = make([]byte, 0, len(p.in)-slo)
	}
	lo = len(p.strs)
	if esc {
		p.strs = appendUnescaped(p.strs, p.in[slo:shi])
	} else {
		p.strs = append(p.strs, p.in[slo:shi]...)
	}
	return lo, len(p.strs), nil
}

// text returns everything kept so far. Later appends do not change these
// bytes (see parser.strs), so the string stays valid and immutable.
func (p *parser) text() string {
	return unsafe.String(unsafe.SliceData(p.strs), len(p.strs))
}

// tags reads an array of arrays of strings. All items share one []string.
func (p *parser) tags() ([][]string, error) {
	type span struct{ lo, hi int }
	var (
		spanBuf [32]span
		endBuf  [16]int
	)
	items := spanBuf[:0] // every item of every tag, in order
	ends := endBuf[:0]   // ends[i] is the end of tag i in items
	if !p.eat('[') {
		return nil, p.errorf("not an array")
	}
	p.skipSpace()
	if !p.eat(']') {
		for {
			if !p.eat('[') {
				return nil, p.errorf("tag %d is not an array", len(ends))
			}
			p.skipSpace()
			if !p.eat(']') {
				for first := len(items); ; {
					lo, hi, err := p.keep()
					if err != nil {
						return nil, fmt.Errorf("tag %d item %d: %w", len(ends), len(items)-first, err)
					}
					items = append(items, span{lo, hi})
					p.skipSpace()
					if p.eat(',') {
						p.skipSpace()
						continue
					}
					if p.eat(']') {
						break
					}
					return nil, p.errorf("expected ',' or ']' in tag %d", len(ends))
				}
			}
			ends = append(ends, len(items))
			p.skipSpace()
			if p.eat(',') {
				p.skipSpace()
				continue
			}
			if p.eat(']') {
				break
			}
			return nil, p.errorf("expected ',' or ']' after tag %d", len(ends)-1)
		}
	}
	text := p.text()
	all := make([]string, len(items))
	for i, s := range items {
		all[i] = text[s.lo:s.hi]
	}
	tags := make([][]string, len(ends))
	start := 0
	for i, end := range ends {
		tags[i] = all[start:end:end] // capped: appending to a tag must not overwrite the next
		start = end
	}
	return tags, nil
}

// skipValue steps over one JSON value of any type, validating it with
// encoding/json's grammar and nesting limit.
func (p *parser) skipValue() error {
	var stackBuf [32]byte
	open := stackBuf[:0] // the closing byte of each open container
	for {
		// A value starts here.
		p.skipSpace()
		if p.pos == len(p.in) {
			return p.errorf("unexpected end of input")
		}
		switch c := p.in[p.pos]; c {
		case '{', '[':
			if len(open) == maxDepth {
				return p.errorf("exceeded max depth")
			}
			p.pos++
			open = append(open, c+2) // '}' or ']'
			p.skipSpace()
			if p.eat(c + 2) {
				open = open[:len(open)-1]
				break
			}
			if c == '{' {
				if err := p.member(); err != nil {
					return err
				}
			}
			continue
		case '"':
			if _, _, _, err := p.str(); err != nil {
				return err
			}
		case 't':
			if err := p.literal("true"); err != nil {
				return err
			}
		case 'f':
			if err := p.literal("false"); err != nil {
				return err
			}
		case 'n':
			if err := p.literal("null"); err != nil {
				return err
			}
		default:
			if err := p.skipNumber(); err != nil {
				return err
			}
		}
		// A value ended: close what it completes, up to the next element.
		for {
			if len(open) == 0 {
				return nil
			}
			p.skipSpace()
			end := open[len(open)-1]
			if p.eat(end) {
				open = open[:len(open)-1]
				continue
			}
			if !p.eat(',') {
				return p.errorf("expected ',' or %q", end)
			}
			if end == '}' {
				p.skipSpace()
				if err := p.member(); err != nil {
					return err
				}
			}
			break
		}
	}
}

// member reads an object key of a skipped value and its colon.
func (p *parser) member() error {
	if _, _, _, err := p.str(); err != nil {
		return err
	}
	p.skipSpace()
	if !p.eat(':') {
		return p.errorf("expected ':' after object key")
	}
	return nil
}

func (p *parser) literal(word string) error {
	if len(p.in)-p.pos < len(word) || string(p.in[p.pos:p.pos+len(word)]) != word {
		return p.errorf("invalid literal")
	}
	p.pos += len(word)
	return nil
}
