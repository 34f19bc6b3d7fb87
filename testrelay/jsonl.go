package testrelay

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nostr-archiver/archiver/event"
)

// ReadJSONL reads one event object per line (blank lines skipped) into
// items that serve each line verbatim. Lines in the export layout
// (event.AppendJSON) are indexed without a JSON parse; any other line
// must pass event.Parse.
func ReadJSONL(r io.Reader) ([]Item, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("testrelay: read jsonl: %w", err)
	}
	var (
		items  []Item
		pubkey = make(map[string]string) // one string per author
	)
	for n := 1; len(data) > 0; n++ {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		line = bytes.TrimSpace(line)
		line = line[:len(line):len(line)] // an append to one item's Raw must not reach the next
		if len(line) == 0 {
			continue
		}
		x, ok := parseExportLine(line)
		if !ok {
			e, err := event.Parse(line)
			if err != nil {
				return nil, fmt.Errorf("testrelay: jsonl line %d: %w", n, err)
			}
			items = append(items, itemOf(e, line))
			continue
		}
		pk, ok := pubkey[string(x.pubkey)]
		if !ok {
			pk = string(x.pubkey)
			pubkey[pk] = pk
		}
		items = append(items, Item{Raw: line, CreatedAt: x.createdAt, Kind: x.kind, PubKey: pk, ID: hex.EncodeToString(x.id[:])})
	}
	return items, nil
}

// exportFields are what the store needs from one export line.
type exportFields struct {
	id        [32]byte
	pubkey    []byte // 64 hex, aliasing the line
	createdAt int64
	kind      int
}

// parseExportLine reads the leading fields of a line in event.AppendJSON's
// exact layout, {"id":"..","pubkey":"..","created_at":N,"kind":N,"tags":..
// ..,"sig":".."}, without a JSON parse. It reports false for any other
// layout; it does not check tags, content and the sig's hex digits.
func parseExportLine(line []byte) (x exportFields, ok bool) {
	const (
		pID     = `{"id":"`
		pPubkey = `","pubkey":"`
		pCreate = `","created_at":`
		pKind   = `,"kind":`
		pTags   = `,"tags":`
		pSig    = `,"sig":"`
	)
	rest, ok := bytes.CutPrefix(line, []byte(pID))
	if !ok || len(rest) < 64 || event.DecodeHex32(&x.id, rest[:64]) != nil {
		return x, false
	}
	if rest, ok = bytes.CutPrefix(rest[64:], []byte(pPubkey)); !ok || len(rest) < 64 {
		return x, false
	}
	var pk [32]byte
	if event.DecodeHex32(&pk, rest[:64]) != nil {
		return x, false
	}
	x.pubkey = rest[:64]
	if rest, ok = bytes.CutPrefix(rest[64:], []byte(pCreate)); !ok {
		return x, false
	}
	var num int64
	if num, rest, ok = leadingInt(rest); !ok {
		return x, false
	}
	x.createdAt = num
	if rest, ok = bytes.CutPrefix(rest, []byte(pKind)); !ok {
		return x, false
	}
	if num, rest, ok = leadingInt(rest); !ok || num > 65535 {
		return x, false
	}
	x.kind = int(num)
	if !bytes.HasPrefix(rest, []byte(pTags)) {
		return x, false
	}
	const tail = len(pSig) + 128 + len(`"}`)
	if len(rest) < len(pTags)+tail || !bytes.HasSuffix(rest, []byte(`"}`)) ||
		!bytes.HasPrefix(rest[len(rest)-tail:], []byte(pSig)) {
		return x, false
	}
	return x, true
}

// leadingInt parses the non-negative decimal integer at the start of b
// (no sign, no leading zero) and returns the rest.
func leadingInt(b []byte) (int64, []byte, bool) {
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	if n == 0 || n > 16 || (n > 1 && b[0] == '0') {
		return 0, b, false
	}
	v, err := strconv.ParseInt(string(b[:n]), 10, 64)
	return v, b[n:], err == nil
}

// cacheVersion changes whenever the generator would sign different events
// for the same options.
const cacheVersion = 1

func (g *gen) cachePath() string {
	o := g.o
	key := fmt.Sprintf("testrelay fixture v%d seed=%d events=%d authors=%d range=%d-%d wall=%d%v/%d unsplittable=%d lookalikes=%d badsigs=%d",
		cacheVersion, o.Seed, o.Events, o.Authors, o.Since, o.Until, o.Wall, o.WallKinds, o.WallAuthors,
		o.UnsplittableWall, o.Lookalikes, o.BadSigs)
	if o.Future+o.FarFuture+o.HiddenWall+o.TagWall > 0 {
		key += fmt.Sprintf(" future=%d/%d hidden=%d/%d tagwall=%d", o.Future, o.FarFuture, o.HiddenWall, o.HiddenWallAuthors, o.TagWall)
	}
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(o.CacheDir, fmt.Sprintf("testrelay-fixture-%x.jsonl", sum[:8]))
}

// loadCache returns the cached signed set if it is there, whole, and what
// this generator signs (checked by re-signing a few events).
func (g *gen) loadCache(total int) ([]signed, bool) {
	data, err := os.ReadFile(g.cachePath())
	if err != nil {
		return nil, false
	}
	authors := make(map[string]string, len(g.pubs)) // so pubkey strings are shared
	for _, p := range g.pubs {
		authors[p] = p
	}
	set := make([]signed, 0, total)
	for len(data) > 0 && len(set) < total {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		line = line[:len(line):len(line)]
		x, ok := parseExportLine(line)
		pk, known := authors[string(x.pubkey)]
		if !ok || !known {
			return nil, false
		}
		set = append(set, signed{line: line, id: x.id, createdAt: x.createdAt, kind: x.kind, pubkey: pk})
	}
	if len(set) != total || len(data) != 0 {
		return nil, false
	}
	for _, i := range []int{0, total / 2, total - 1} {
		if total == 0 {
			break
		}
		e, author := g.spec(i)
		if g.signWith(e, author) != nil || !bytes.Equal(event.AppendJSON(nil, e), set[i].line) {
			return nil, false
		}
	}
	return set, true
}

func (g *gen) writeCache(set []signed) (err error) {
	path := g.cachePath()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("testrelay: fixture cache: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "testrelay-fixture-*.tmp")
	if err != nil {
		return fmt.Errorf("testrelay: fixture cache: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
			err = fmt.Errorf("testrelay: fixture cache: %w", err)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	for i := range set {
		_, _ = w.Write(set[i].line)
		_ = w.WriteByte('\n')
	}
	if err = w.Flush(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
