package testrelay

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/nostr-archiver/archiver/event"
)

// FixtureOptions says what Generate makes. Everything is deterministic
// from Seed; every count is 0 (none) unless set.
type FixtureOptions struct {
	Seed uint64

	// Events is the number of ordinary valid events, spread uniformly over
	// [Since, Until] by Authors authors (default 50) over kinds 1, 7, 6, 0,
	// 3, 30023, with 100 B to 4 KB of content and some tags.
	Events  int
	Authors int
	Since   int64 // default Until - 30 days
	Until   int64 // default 1_700_000_000

	// Wall puts this many valid events in one created_at second (WallAt),
	// over WallKinds (default 1, 7, 6, 9735; the first kind takes 60%, so a
	// wall over 833 events is more than a 500-event page in one kind) and
	// WallAuthors authors (default 10) within each kind, so that splitting
	// the second by kind then by author gives sub-queries of at most
	// ceil(0.6*Wall/WallAuthors) events.
	Wall        int
	WallKinds   []int
	WallAuthors int
	// UnsplittableWall puts this many valid events of one author and one
	// kind in another second (UnsplittableAt): no split by kind or author
	// makes them fit a page smaller than this.
	UnsplittableWall int

	// Future events are dated 1 minute to 1 day after Until (clock skew),
	// FarFuture ones centuries after it (year 2286): a crawl whose "now"
	// is Until must still archive them. They are ordinary events otherwise.
	Future, FarFuture int
	// HiddenWall puts this many kind-1 events in one second (HiddenAt),
	// written by HiddenWallAuthors authors of their own (default
	// HiddenWall/5), each of whom also wrote one event elsewhere: a full
	// page of the second shows only some authors, so splitting by the
	// authors seen misses the rest, and only authors known from elsewhere
	// (or COUNT per author) find them.
	HiddenWall, HiddenWallAuthors int
	// TagWall puts this many kind-1 events of a single author in one second
	// (TagWallAt), tagged ["t","tagwall<k>"] in groups of at most 100: no
	// split by kind or author makes them fit a page of 100, a split by #t
	// does.
	TagWall int

	// ForgedIDs are copies of valid events carrying the real id (and sig)
	// over different content: "id-mismatch", sharing the id of a valid
	// event. Half are added before the original, half after.
	ForgedIDs int
	// RandomIDs are events whose id is random: "id-mismatch".
	RandomIDs int
	// BadSigs are events with a correct id whose signature has one byte
	// altered: "bad-sig". Their valid form is never served.
	BadSigs int
	// BadPubKeys are events whose pubkey is not an x coordinate on the
	// curve, with a correct id: "bad-pubkey".
	BadPubKeys int
	// Malformed are objects that fit in an EVENT frame but are not events
	// (missing fields, uppercase hex, created_at as a string, ...):
	// "malformed".
	Malformed int
	// MalformedFrames are Frame items that are not valid relay messages
	// (truncated JSON, no object, wrong types): "malformed", Frame true.
	MalformedFrames int

	// Duplicates are valid events stored twice, so a page carries them
	// twice in a row.
	Duplicates int
	// Lookalikes are valid events whose content and tags contain
	// `"id":"<64 hex>"` and `"created_at":123` lookalikes and trailing
	// backslashes; half are served with an extra top-level key, placed
	// before the real ones, whose value is an object with its own "id" and
	// "created_at".
	Lookalikes int
	// Varied are valid events served in another serialization: shuffled
	// keys, whitespace, and escapes such as \/, \u00e9 and \u003c. They
	// stay valid: the id is over the canonical form.
	Varied int

	// CacheDir, if set, caches the signed events there as JSONL (signing
	// dominates generation: ~60 us per event per core), keyed by every
	// option that changes them.
	CacheDir string
	// Workers signs in parallel; default GOMAXPROCS.
	Workers int
}

const (
	defaultAuthors     = 50
	defaultUntil       = 1_700_000_000
	defaultSpan        = 30 * 24 * 3600
	defaultWallAuthors = 10
)

var defaultWallKinds = []int{1, 7, 6, 9735}

// Verdict reasons, the names an archiver's verifier reports.
const (
	ReasonMalformed  = "malformed"
	ReasonIDMismatch = "id-mismatch"
	ReasonBadSig     = "bad-sig"
	ReasonBadPubKey  = "bad-pubkey"
)

// Fixture is a generated corpus and the truth about it.
type Fixture struct {
	// Items is everything to Add to a relay.
	Items []Item
	// Valid lists every valid event once, sorted by id, with its canonical
	// export line (event.AppendJSON, no newline): what a complete archive
	// exports.
	Valid []ValidEvent
	// Bad lists every invalid copy served, with the reason a verifier must
	// give. An id may appear in both Valid and Bad (forged copies).
	Bad []BadCopy

	// Since and Until bound every item's created_at but the Future and
	// FarFuture events'.
	Since, Until int64
	// WallAt is the wall's second and WallSize its count (0: no wall).
	WallAt   int64
	WallSize int
	// UnsplittableAt and UnsplittableSize describe the unsplittable wall.
	UnsplittableAt   int64
	UnsplittableSize int
	// HiddenAt, TagWallAt: the hidden-author and tag walls' seconds.
	HiddenAt, TagWallAt int64
	// Future lists the ids of the Future and FarFuture events.
	Future [][32]byte
	// Authors are the hex pubkeys of the generated authors.
	Authors []string

	// Ids of the valid events given each treatment.
	Varied, Duplicated, Lookalikes [][32]byte
}

// ValidEvent is one valid event and its canonical export line.
type ValidEvent struct {
	ID   [32]byte
	Line []byte
}

// BadCopy is one invalid copy served. ID is the id as claimed (hex, maybe
// not lowercase or not 64 characters, "" if none).
type BadCopy struct {
	ID     string
	Reason string
	Raw    []byte
	Frame  bool // Raw is a whole frame (an Item with Frame set)
}

// Chronological returns the fixture's items sorted by created_at, oldest
// first: tests split them into a history and what is published later.
func (f *Fixture) Chronological() []Item {
	items := slices.Clone(f.Items)
	slices.SortStableFunc(items, func(a, b Item) int { return cmp.Compare(a.CreatedAt, b.CreatedAt) })
	return items
}

// Lookup returns the canonical line of the valid event id.
func (f *Fixture) Lookup(id [32]byte) ([]byte, bool) {
	i, ok := slices.BinarySearchFunc(f.Valid, id, func(v ValidEvent, id [32]byte) int {
		return bytes.Compare(v.ID[:], id[:])
	})
	if !ok {
		return nil, false
	}
	return f.Valid[i].Line, true
}

func (o FixtureOptions) withDefaults() FixtureOptions {
	if o.Authors == 0 {
		o.Authors = defaultAuthors
	}
	if o.Until == 0 {
		o.Until = defaultUntil
	}
	if o.Since == 0 {
		o.Since = o.Until - defaultSpan
	}
	if o.WallKinds == nil {
		o.WallKinds = defaultWallKinds
	}
	if o.WallAuthors == 0 {
		o.WallAuthors = min(defaultWallAuthors, o.Authors)
	}
	if o.HiddenWall > 0 && o.HiddenWallAuthors == 0 {
		o.HiddenWallAuthors = max(1, o.HiddenWall/5)
	}
	if o.Workers == 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	return o
}

// ErrInvalidFixture is wrapped by every error FixtureOptions.Validate
// returns.
var ErrInvalidFixture = errors.New("testrelay: invalid fixture options")

// Validate reports the first option that cannot work.
func (o FixtureOptions) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidFixture, fmt.Sprintf(format, args...))
	}
	for _, n := range []int{o.Future, o.FarFuture, o.HiddenWall, o.HiddenWallAuthors, o.TagWall, o.Events, o.Wall, o.UnsplittableWall, o.ForgedIDs, o.RandomIDs, o.BadSigs,
		o.BadPubKeys, o.Malformed, o.MalformedFrames, o.Duplicates, o.Lookalikes, o.Varied, o.Workers} {
		if n < 0 {
			return bad("negative count %d", n)
		}
	}
	switch {
	case o.Authors < 1:
		return bad("Authors %d < 1", o.Authors)
	case o.Since < 0 || o.Until-o.Since < 10:
		return bad("range [%d, %d] must be at least 10 s and not negative", o.Since, o.Until)
	case o.Wall > 0 && len(o.WallKinds) == 0:
		return bad("Wall needs WallKinds")
	case o.WallAuthors < 1 || o.WallAuthors > o.Authors:
		return bad("WallAuthors %d not in [1, Authors=%d]", o.WallAuthors, o.Authors)
	case o.Varied+o.ForgedIDs+o.Duplicates > o.Events:
		return bad("Varied+ForgedIDs+Duplicates = %d > Events = %d", o.Varied+o.ForgedIDs+o.Duplicates, o.Events)
	}
	return nil
}

// Generate builds the fixture o describes.
func Generate(o FixtureOptions) (*Fixture, error) {
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	g := newGen(o)
	set, err := g.signedSet()
	if err != nil {
		return nil, err
	}
	return g.assemble(set), nil
}

// gen holds what every part of a fixture is derived from.
type gen struct {
	o       FixtureOptions
	keys    []*btcec.PrivateKey // Authors, then the unsplittable wall's author
	pubs    []string
	pubRaw  [][32]byte
	wallAt  int64
	unsplAt int64
	// hiddenAt and tagAt are the hidden-author and tag walls' seconds.
	hiddenAt, tagAt int64
}

// The signed set, in this order; each part has its own random stream.
const (
	partOrdinary = iota + 1
	partWall
	partUnsplittable
	partLookalike
	partBadSig
	partForged
	partRandomID
	partBadPubKey
	partMalformed
	partFrame
	partChoice
	partVaried
	partFuture
	partHidden
	partTagWall
)

// farFuture is where FarFuture events are dated: year 2286.
const farFuture = 9_999_999_000

func newGen(o FixtureOptions) *gen {
	g := &gen{o: o}
	span := o.Until - o.Since
	g.wallAt = o.Since + span/3
	g.unsplAt = o.Since + 2*span/3
	g.hiddenAt = o.Since + span/2
	g.tagAt = o.Since + 5*span/6
	n := o.Authors + 1 + o.HiddenWallAuthors
	g.keys = make([]*btcec.PrivateKey, n)
	g.pubs = make([]string, n)
	g.pubRaw = make([][32]byte, n)
	for i := range n {
		var b [24]byte
		copy(b[:], "testrelay author")
		binary.BigEndian.PutUint64(b[16:], o.Seed)
		h := sha256.Sum256(append(b[:], byte(i>>24), byte(i>>16), byte(i>>8), byte(i)))
		g.keys[i], _ = btcec.PrivKeyFromBytes(h[:])
		copy(g.pubRaw[i][:], schnorr.SerializePubKey(g.keys[i].PubKey()))
		g.pubs[i] = hex.EncodeToString(g.pubRaw[i][:])
	}
	return g
}

func (g *gen) rng(part, i int) *rand.Rand {
	return rand.New(rand.NewPCG(g.o.Seed^uint64(part)*0x9e3779b97f4a7c15, uint64(i)))
}

// signedCounts returns the sizes of the signed set's parts, in order.
func (g *gen) signedCounts() []int {
	o := g.o
	return []int{o.Events, o.Wall, o.UnsplittableWall, o.Lookalikes, o.BadSigs,
		o.Future + o.FarFuture, o.HiddenWall + o.HiddenWallAuthors, o.TagWall}
}

// trapEvent is event i of the traps that follow the bad signatures: part 5
// future-dated, 6 the hidden wall and its authors' other events, 7 the tag
// wall.
func (g *gen) trapEvent(part, i int) (*event.Event, int) {
	o := g.o
	switch part {
	case 5:
		e, author := g.ordinary(g.rng(partFuture, i))
		if i < o.Future {
			e.CreatedAt = o.Until + 60 + g.rng(partFuture, -1-i).Int64N(86400-60+1)
		} else {
			e.CreatedAt = farFuture + int64(i-o.Future)
		}
		return e, author
	case 6:
		r := g.rng(partHidden, i)
		if i < o.HiddenWall {
			e := &event.Event{CreatedAt: g.hiddenAt, Kind: 1, Content: content(r, 100+r.IntN(200))}
			return e, o.Authors + 1 + i%o.HiddenWallAuthors
		}
		e, _ := g.ordinary(r)
		return e, o.Authors + 1 + (i - o.HiddenWall)
	default:
		r := g.rng(partTagWall, i)
		groups := max(2, (o.TagWall+99)/100)
		e := &event.Event{CreatedAt: g.tagAt, Kind: 1, Content: content(r, 100+r.IntN(200)),
			Tags: [][]string{{"t", fmt.Sprintf("tagwall%d", i%groups)}}}
		return e, o.Authors
	}
}

// spec returns the unsigned event number i of the signed set and the index
// of the author key that signs it.
func (g *gen) spec(i int) (*event.Event, int) {
	o := g.o
	part := 0
	for _, n := range g.signedCounts() {
		if i < n {
			break
		}
		i -= n
		part++
	}
	switch part {
	case 0:
		return g.ordinary(g.rng(partOrdinary, i))
	case 1:
		return g.wallEvent(i)
	case 2:
		r := g.rng(partUnsplittable, i)
		e := &event.Event{CreatedAt: g.unsplAt, Kind: 1, Content: content(r, 100+r.IntN(300))}
		return e, o.Authors
	case 3:
		return g.lookalike(g.rng(partLookalike, i))
	case 4:
		return g.ordinary(g.rng(partBadSig, i))
	default:
		return g.trapEvent(part, i)
	}
}

var ordinaryKinds = []struct{ kind, weight int }{{1, 60}, {7, 20}, {6, 8}, {0, 4}, {3, 3}, {30023, 5}}

func (g *gen) ordinary(r *rand.Rand) (*event.Event, int) {
	o := g.o
	u := r.Float64()
	author := int(float64(o.Authors) * u * u) // a few authors write most
	e := &event.Event{CreatedAt: o.Since + r.Int64N(o.Until-o.Since+1)}
	for e.CreatedAt == g.wallAt || e.CreatedAt == g.unsplAt || e.CreatedAt == g.hiddenAt || e.CreatedAt == g.tagAt {
		e.CreatedAt = o.Since + r.Int64N(o.Until-o.Since+1)
	}
	w := r.IntN(100)
	for _, k := range ordinaryKinds {
		if w < k.weight {
			e.Kind = k.kind
			break
		}
		w -= k.weight
	}
	e.Content = content(r, contentSize(r))
	e.Tags = tags(r, e.Kind)
	return e, author
}

// contentSize is 100 B to 4 KB, most events near the small end.
func contentSize(r *rand.Rand) int {
	u := r.Float64()
	return int(100 * math.Pow(40, u*u))
}

func (g *gen) wallEvent(i int) (*event.Event, int) {
	o := g.o
	kinds := o.WallKinds
	first := o.Wall * 6 / 10
	var kind, j int // kind index, index within that kind
	if i < first || len(kinds) == 1 {
		kind, j = 0, i
	} else {
		rest := i - first
		kind, j = 1+rest%(len(kinds)-1), rest/(len(kinds)-1)
	}
	r := g.rng(partWall, i)
	e := &event.Event{CreatedAt: g.wallAt, Kind: kinds[kind], Content: content(r, 100+r.IntN(400))}
	return e, j % o.WallAuthors
}

func (g *gen) lookalike(r *rand.Rand) (*event.Event, int) {
	e, author := g.ordinary(r)
	fake := randHex(r, 32)
	e.Content = fmt.Sprintf(`lookalikes: "id":"%s","created_at":123 {"id":"%s","created_at":%d,"kind":1} \u0022id\u0022 %s \"id\":\"%s\" trailing backslash \`,
		fake, randHex(r, 32), e.CreatedAt+1, e.Content, fake)
	e.Tags = append(e.Tags,
		[]string{"id", randHex(r, 32)},
		[]string{"x", `"id":"` + fake + `"`, `"created_at":123`},
		[]string{"created_at", "123"},
		[]string{"backslash", `\`},
	)
	return e, author
}

var words = []string{
	"nostr", "relay", "note", "zap", "sats", "bitcoin", "hello", "world", "the", "a", "of", "to",
	"and", "in", "is", "gm", "pv", "just", "shipped", "archive", "every", "event", "signed",
	"café", "naïve", "über", "日本語", "🚀", "⚡", "emoji😀", "</p>", "<b>bold</b>", "a/b",
	"https://example.com/path/to?x=1&y=2", "#nostr", "\"quoted\"", `back\slash`, "tab\there",
	"line\nbreak", "cr\r", "bell\b", "ff\f", "ctl\x01", "Ωmega", "ñ", "€100",
}

func content(r *rand.Rand, size int) string {
	b := make([]byte, 0, size+16)
	for len(b) < size {
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, words[r.IntN(len(words))]...)
	}
	return string(b)
}

func randHex(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return hex.EncodeToString(b)
}

func tags(r *rand.Rand, kind int) [][]string {
	var t [][]string
	switch kind {
	case 1:
		for range r.IntN(4) {
			switch r.IntN(3) {
			case 0:
				t = append(t, []string{"e", randHex(r, 32), "wss://relay.example.com", "reply"})
			case 1:
				t = append(t, []string{"p", randHex(r, 32)})
			default:
				t = append(t, []string{"t", words[r.IntN(len(words))]})
			}
		}
	case 6, 7:
		t = [][]string{{"e", randHex(r, 32)}, {"p", randHex(r, 32)}}
	case 3:
		for range 10 + r.IntN(40) {
			t = append(t, []string{"p", randHex(r, 32)})
		}
	case 30023:
		t = [][]string{{"d", randHex(r, 8)}, {"title", words[r.IntN(len(words))]}}
	}
	return t
}

// signed is one validly signed event of the signed set.
type signed struct {
	line      []byte // canonical export line
	id        [32]byte
	createdAt int64
	kind      int
	pubkey    string
}

func (s *signed) item() Item {
	return Item{Raw: s.line, CreatedAt: s.createdAt, Kind: s.kind, PubKey: s.pubkey, ID: hex.EncodeToString(s.id[:])}
}

// withTags indexes the item's single-letter tags, for tag filters.
func withTags(it Item) Item {
	var e struct {
		Tags [][]string `json:"tags"`
	}
	if json.Unmarshal(it.Raw, &e) == nil {
		it.Tags = letterTags(e.Tags)
	}
	return it
}

// signedSet returns the signed events, from the cache when it has them.
func (g *gen) signedSet() ([]signed, error) {
	total := 0
	for _, n := range g.signedCounts() {
		total += n
	}
	if g.o.CacheDir != "" {
		if set, ok := g.loadCache(total); ok {
			return set, nil
		}
	}
	set, err := g.sign(total)
	if err != nil {
		return nil, err
	}
	if g.o.CacheDir != "" {
		if err := g.writeCache(set); err != nil {
			return nil, err
		}
	}
	return set, nil
}

// sign makes the signed set on Workers goroutines. Lines are carved out of
// per-worker arenas to spare the allocator a million small objects.
func (g *gen) sign(total int) ([]signed, error) {
	set := make([]signed, total)
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		err     error
		next    = make(chan int, g.o.Workers)
	)
	const chunk = 256
	for range g.o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var arena []byte
			for start := range next {
				for i := start; i < min(start+chunk, total); i++ {
					e, author := g.spec(i)
					if serr := g.signWith(e, author); serr != nil {
						errOnce.Do(func() { err = serr })
						continue
					}
					if cap(arena)-len(arena) < 64<<10 {
						arena = make([]byte, 0, 1<<20)
					}
					n := len(arena)
					arena = event.AppendJSON(arena, e)
					set[i] = signed{line: arena[n:len(arena):len(arena)], id: e.ID, createdAt: e.CreatedAt, kind: e.Kind, pubkey: g.pubs[author]}
				}
			}
		}()
	}
	for start := 0; start < total; start += chunk {
		next <- start
	}
	close(next)
	wg.Wait()
	return set, err
}

// signWith signs e as author. It skips btcec's self-check after signing
// (schnorr.FastSign), which costs a verification, four times the signing
// itself; the fixture tests verify what is signed here.
func (g *gen) signWith(e *event.Event, author int) error {
	e.PubKey = g.pubRaw[author]
	e.ID, _ = e.ComputeID(nil)
	sig, err := schnorr.Sign(g.keys[author], e.ID[:], schnorr.FastSign())
	if err != nil {
		return fmt.Errorf("testrelay: sign: %w", err)
	}
	copy(e.Sig[:], sig.Serialize())
	return nil
}
