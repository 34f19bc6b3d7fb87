package testrelay

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/nostr-archiver/archiver/event"
)

// assemble turns the signed set into the fixture: the valid events (some
// varied, duplicated or with lookalikes) and every kind of bad copy.
func (g *gen) assemble(set []signed) *Fixture {
	o := g.o
	f := &Fixture{
		Since: o.Since, Until: o.Until,
		Authors: slices.Clone(g.pubs),
	}
	if o.Wall > 0 {
		f.WallAt, f.WallSize = g.wallAt, o.Wall
	}
	if o.UnsplittableWall > 0 {
		f.UnsplittableAt, f.UnsplittableSize = g.unsplAt, o.UnsplittableWall
	}

	// Disjoint sets of ordinary events get each treatment.
	const (
		plain = iota
		varied
		forged
		duplicated
	)
	var role []uint8
	if o.Varied+o.ForgedIDs+o.Duplicates > 0 {
		role = make([]uint8, o.Events)
		perm := g.rng(partChoice, 0).Perm(o.Events)
		for k, i := range perm[:o.Varied+o.ForgedIDs+o.Duplicates] {
			switch {
			case k < o.Varied:
				role[i] = varied
			case k < o.Varied+o.ForgedIDs:
				role[i] = forged
			default:
				role[i] = duplicated
			}
		}
	}

	nValid := o.Events + o.Wall + o.UnsplittableWall + o.Lookalikes
	lookStart := nValid - o.Lookalikes
	items := make([]Item, 0, len(set)+o.Duplicates+o.ForgedIDs+o.RandomIDs+o.BadPubKeys+o.Malformed+o.MalformedFrames)
	var before, after []Item // forged copies, ahead of and behind their original
	f.Valid = make([]ValidEvent, 0, nValid)
	nForged := 0
	for i := range nValid {
		s := &set[i]
		it := s.item()
		f.Valid = append(f.Valid, ValidEvent{ID: s.id, Line: s.line})
		if i >= lookStart {
			f.Lookalikes = append(f.Lookalikes, s.id)
			if (i-lookStart)%2 == 1 {
				it.Raw = nestedLookalike(s)
			}
		}
		var r uint8
		if i < len(role) {
			r = role[i]
		}
		switch r {
		case varied:
			it.Raw = appendVaried(nil, mustParse(s.line), g.rng(partVaried, i))
			f.Varied = append(f.Varied, s.id)
		case duplicated:
			items = append(items, it)
			f.Duplicated = append(f.Duplicated, s.id)
		case forged:
			fc := forgedCopy(s)
			f.Bad = append(f.Bad, BadCopy{ID: fc.ID, Reason: ReasonIDMismatch, Raw: fc.Raw})
			if nForged++; nForged%2 == 0 {
				before = append(before, fc)
			} else {
				after = append(after, fc)
			}
		}
		items = append(items, it)
	}
	items = append(items, after...)

	add := func(it Item, reason string) {
		items = append(items, it)
		f.Bad = append(f.Bad, BadCopy{ID: it.ID, Reason: reason, Raw: it.Raw, Frame: it.Frame})
	}
	for k := range o.BadSigs {
		e := mustParse(set[nValid+k].line)
		r := g.rng(partBadSig, -1-k)
		e.Sig[32+r.IntN(32)] ^= 1 << r.IntN(8)
		add(itemOf(e, event.AppendJSON(nil, e)), ReasonBadSig)
	}
	for k := range o.RandomIDs {
		r := g.rng(partRandomID, k)
		e, author := g.ordinary(r)
		e.PubKey = g.pubRaw[author]
		fillRandom(r, e.ID[:])
		fillRandom(r, e.Sig[:])
		add(itemOf(e, event.AppendJSON(nil, e)), ReasonIDMismatch)
	}
	for k := range o.BadPubKeys {
		r := g.rng(partBadPubKey, k)
		e, _ := g.ordinary(r)
		for {
			fillRandom(r, e.PubKey[:])
			if _, err := schnorr.ParsePubKey(e.PubKey[:]); err != nil {
				break // about half of all x have no point on the curve
			}
		}
		e.ID, _ = e.ComputeID(nil)
		fillRandom(r, e.Sig[:])
		add(itemOf(e, event.AppendJSON(nil, e)), ReasonBadPubKey)
	}
	for k := range o.Malformed {
		e := g.junkEvent(partMalformed, k)
		raw, claimed := pickFault(malformedObjects, k, e).make(fieldsOf(e))
		it := itemOf(e, raw)
		it.ID = claimed
		add(it, ReasonMalformed)
	}
	for k := range o.MalformedFrames {
		e := g.junkEvent(partFrame, k)
		raw, claimed := pickFault(malformedFrames, k, e).make(fieldsOf(e))
		it := itemOf(e, raw)
		it.ID, it.Frame = claimed, true
		add(it, ReasonMalformed)
	}

	// The traps: valid events served as they are, their tags indexed.
	for i := nValid + o.BadSigs; i < len(set); i++ {
		s := &set[i]
		items = append(items, withTags(s.item()))
		f.Valid = append(f.Valid, ValidEvent{ID: s.id, Line: s.line})
		if s.createdAt > o.Until {
			f.Future = append(f.Future, s.id)
		}
	}
	if o.HiddenWall > 0 {
		f.HiddenAt = g.hiddenAt
	}
	if o.TagWall > 0 {
		f.TagWallAt = g.tagAt
	}

	f.Items = append(before, items...)
	slices.SortFunc(f.Valid, func(a, b ValidEvent) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	return f
}

// pickFault returns the k-th fault to apply. Each fault is used once;
// after that only faults whose bytes depend on the event are reused, so
// that no two bad copies are byte-identical (identical bytes are one copy
// to an archiver, however often they are sent).
func pickFault(faults []fault, k int, e *event.Event) fault {
	if k < len(faults) {
		return faults[k]
	}
	var unique []fault
	other := *e
	other.Content += "x"
	for _, f := range faults {
		a, _ := f.make(fieldsOf(e))
		b, _ := f.make(fieldsOf(&other))
		if !bytes.Equal(a, b) {
			unique = append(unique, f)
		}
	}
	return unique[k%len(unique)]
}

func mustParse(line []byte) *event.Event {
	e, err := event.Parse(line)
	if err != nil {
		panic("testrelay: a generated event does not parse: " + err.Error())
	}
	return e
}

func itemOf(e *event.Event, raw []byte) Item {
	return Item{Raw: raw, CreatedAt: e.CreatedAt, Kind: e.Kind,
		PubKey: hex.EncodeToString(e.PubKey[:]), ID: hex.EncodeToString(e.ID[:])}
}

func fillRandom(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// forgedCopy keeps s's id and sig over other content.
func forgedCopy(s *signed) Item {
	e := mustParse(s.line)
	e.Content += " [forged copy]"
	return itemOf(e, event.AppendJSON(nil, e))
}

// nestedLookalike serves s with an extra first key whose object holds an
// "id" and a "created_at" that are not the event's.
func nestedLookalike(s *signed) []byte {
	fake := sha256.Sum256(s.id[:])
	raw := fmt.Appendf(nil, `{"lookalike":{"id":"%x","created_at":123,"kind":1,"content":"\"id\":\"%x\""},`, fake, fake)
	return append(raw, s.line[1:]...)
}

// junkEvent is an unsigned event with a random id and sig, the raw
// material of malformed objects and frames.
func (g *gen) junkEvent(part, k int) *event.Event {
	r := g.rng(part, k)
	e, author := g.ordinary(r)
	e.PubKey = g.pubRaw[author]
	fillRandom(r, e.ID[:])
	fillRandom(r, e.Sig[:])
	return e
}

// field is one key of an event object and its JSON value.
type field struct{ key, val string }

func fieldsOf(e *event.Event) []field {
	return []field{
		{"id", `"` + hex.EncodeToString(e.ID[:]) + `"`},
		{"pubkey", `"` + hex.EncodeToString(e.PubKey[:]) + `"`},
		{"created_at", strconv.FormatInt(e.CreatedAt, 10)},
		{"kind", strconv.Itoa(e.Kind)},
		{"tags", string(appendTags(nil, e.Tags, event.AppendString, nil))},
		{"content", string(event.AppendString(nil, e.Content))},
		{"sig", `"` + hex.EncodeToString(e.Sig[:]) + `"`},
	}
}

func render(fs []field) []byte {
	b := []byte{'{'}
	for i, f := range fs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, f.key)
		b = append(b, ':')
		b = append(b, f.val...)
	}
	return append(b, '}')
}

func get(fs []field, key string) string {
	for _, f := range fs {
		if f.key == key {
			return f.val
		}
	}
	return ""
}

func with(fs []field, key, val string) []field {
	fs = slices.Clone(fs)
	for i := range fs {
		if fs[i].key == key {
			fs[i].val = val
		}
	}
	return fs
}

func without(fs []field, key string) []field {
	return slices.DeleteFunc(slices.Clone(fs), func(f field) bool { return f.key == key })
}

func claimedID(fs []field) string { return strings.Trim(get(fs, "id"), `"`) }

type fault struct {
	name string
	make func(fs []field) (raw []byte, claimed string)
}

// malformedObjects fit inside an EVENT frame as JSON but are not events.
var malformedObjects = []fault{
	{"missing sig", func(fs []field) ([]byte, string) { return render(without(fs, "sig")), claimedID(fs) }},
	{"missing id", func(fs []field) ([]byte, string) { return render(without(fs, "id")), "" }},
	{"uppercase id", func(fs []field) ([]byte, string) {
		up := strings.ToUpper(get(fs, "id"))
		return render(with(fs, "id", up)), strings.Trim(up, `"`)
	}},
	{"created_at string", func(fs []field) ([]byte, string) {
		return render(with(fs, "created_at", `"`+get(fs, "created_at")+`"`)), claimedID(fs)
	}},
	{"kind string", func(fs []field) ([]byte, string) {
		return render(with(fs, "kind", `"`+get(fs, "kind")+`"`)), claimedID(fs)
	}},
	{"negative kind", func(fs []field) ([]byte, string) { return render(with(fs, "kind", "-1")), claimedID(fs) }},
	{"tags object", func(fs []field) ([]byte, string) { return render(with(fs, "tags", "{}")), claimedID(fs) }},
	{"tag with a number", func(fs []field) ([]byte, string) {
		return render(with(fs, "tags", `[["e",1]]`)), claimedID(fs)
	}},
	{"content number", func(fs []field) ([]byte, string) { return render(with(fs, "content", "42")), claimedID(fs) }},
	{"content null", func(fs []field) ([]byte, string) { return render(with(fs, "content", "null")), claimedID(fs) }},
	{"duplicate id key", func(fs []field) ([]byte, string) {
		return render(append(slices.Clone(fs), field{"id", `"` + strings.Repeat("ab", 32) + `"`})), claimedID(fs)
	}},
	{"short id", func(fs []field) ([]byte, string) {
		id := claimedID(fs)[:63]
		return render(with(fs, "id", `"`+id+`"`)), id
	}},
	{"created_at fraction", func(fs []field) ([]byte, string) {
		return render(with(fs, "created_at", get(fs, "created_at")+".5")), claimedID(fs)
	}},
	{"created_at exponent", func(fs []field) ([]byte, string) {
		return render(with(fs, "created_at", "1.7e9")), claimedID(fs)
	}},
	{"sig not hex", func(fs []field) ([]byte, string) {
		return render(with(fs, "sig", `"`+strings.Repeat("zz", 64)+`"`)), claimedID(fs)
	}},
	{"short pubkey", func(fs []field) ([]byte, string) {
		return render(with(fs, "pubkey", get(fs, "pubkey")[:33]+`"`)), claimedID(fs)
	}},
	{"array", func(fs []field) ([]byte, string) { return []byte("[" + get(fs, "id") + "]"), "" }},
	{"null", func([]field) ([]byte, string) { return []byte("null"), "" }},
}

// malformedFrames are whole frames that are not valid relay messages.
var malformedFrames = []fault{
	{"truncated", func(fs []field) ([]byte, string) {
		obj := render(fs)
		return append([]byte(`["EVENT","`+SubPlaceholder+`",`), obj[:len(obj)/2]...), claimedID(fs)
	}},
	{"unclosed array", func(fs []field) ([]byte, string) {
		return append([]byte(`["EVENT","`+SubPlaceholder+`",`), render(fs)...), claimedID(fs)
	}},
	{"not JSON", func([]field) ([]byte, string) { return []byte("this is not JSON"), "" }},
	{"no object", func([]field) ([]byte, string) { return []byte(`["EVENT","` + SubPlaceholder + `"]`), "" }},
	{"label only", func([]field) ([]byte, string) { return []byte(`["EVENT"]`), "" }},
	{"empty array", func([]field) ([]byte, string) { return []byte(`[]`), "" }},
	{"object", func([]field) ([]byte, string) { return []byte(`{"EVENT":"` + SubPlaceholder + `"}`), "" }},
	{"numeric sub", func(fs []field) ([]byte, string) {
		return append(append([]byte(`["EVENT",42,`), render(fs)...), ']'), claimedID(fs)
	}},
	{"empty", func([]field) ([]byte, string) { return []byte{}, "" }},
	{"trailing garbage", func(fs []field) ([]byte, string) {
		return append(append([]byte(`["EVENT","`+SubPlaceholder+`",`), render(fs)...), "]]garbage"...), claimedID(fs)
	}},
}

// appendTags appends tags as JSON with str for each string and sep
// (possibly nil) for the whitespace around punctuation.
func appendTags(dst []byte, tags [][]string, str func([]byte, string) []byte, sep func([]byte) []byte) []byte {
	if sep == nil {
		sep = func(b []byte) []byte { return b }
	}
	dst = append(dst, '[')
	for i, t := range tags {
		if i > 0 {
			dst = append(sep(dst), ',')
		}
		dst = append(sep(dst), '[')
		for j, s := range t {
			if j > 0 {
				dst = append(sep(dst), ',')
			}
			dst = str(sep(dst), s)
		}
		dst = append(sep(dst), ']')
	}
	return append(sep(dst), ']')
}

var spaces = []string{"", "", " ", "\n", "\t", "  ", "\r\n  "}

// appendVaried serializes e validly but not canonically: keys shuffled,
// whitespace between tokens, and every '/', '<', '>', '&' and non-ASCII
// character escaped (\/, \u003c, \u00e9, surrogate pairs).
func appendVaried(dst []byte, e *event.Event, r *rand.Rand) []byte {
	ws := func(b []byte) []byte { return append(b, spaces[r.IntN(len(spaces))]...) }
	fs := fieldsOf(e)
	for i := range fs {
		switch fs[i].key {
		case "tags":
			fs[i].val = string(appendTags(nil, e.Tags, appendEscaped, ws))
		case "content":
			fs[i].val = string(appendEscaped(nil, e.Content))
		}
	}
	r.Shuffle(len(fs), func(i, j int) { fs[i], fs[j] = fs[j], fs[i] })
	dst = append(ws(dst), '{')
	for i, f := range fs {
		if i > 0 {
			dst = append(ws(dst), ',')
		}
		dst = strconv.AppendQuote(ws(dst), f.key)
		dst = append(ws(dst), ':')
		dst = append(ws(dst), f.val...)
	}
	return append(ws(dst), '}')
}

// appendEscaped is a JSON string encoder that escapes far more than
// NIP-01's canonical form does.
func appendEscaped(dst []byte, s string) []byte {
	const hexdig = "0123456789abcdef"
	u := func(dst []byte, c rune) []byte {
		return append(dst, '\\', 'u', hexdig[c>>12&0xf], hexdig[c>>8&0xf], hexdig[c>>4&0xf], hexdig[c&0xf])
	}
	dst = append(dst, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', byte(c))
		case c == '/':
			dst = append(dst, '\\', '/')
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c < 0x20 || c == '<' || c == '>' || c == '&' || (c >= 0x80 && c < 0x10000):
			dst = u(dst, c)
		case c >= 0x10000:
			c -= 0x10000
			dst = u(u(dst, 0xd800+(c>>10)), 0xdc00+(c&0x3ff))
		default:
			dst = append(dst, byte(c))
		}
	}
	return append(dst, '"')
}
