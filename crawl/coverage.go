package crawl

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"

	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/shard"
	"go.uber.org/zap"
)

// RangeCoverage says how one created_at range of a relay's crawl is known
// to be held, or why it is not. Until 0 means no upper bound (an open job's
// newest range, future-dated events included).
type RangeCoverage struct {
	Since int64 `json:"since"`
	Until int64 `json:"until"`
	// Proof is ProofPaged, ProofCount or ProofUnproven.
	Proof string `json:"proof"`
	Held  int64  `json:"held"`            // distinct ids this run fetched in the range
	Count int64  `json:"count,omitempty"` // the relay's NIP-45 COUNT for it, when answered
	// Repaged counts the times a short range was paged again.
	Repaged int    `json:"repaged,omitempty"`
	Why     string `json:"why,omitempty"`
	At      int64  `json:"at"`
}

// Proofs of a range.
const (
	ProofPaged    = "paged"    // paged to the end; the relay answers no COUNT to check it by
	ProofCount    = "count"    // paged to the end, and the relay's COUNT is no more than held
	ProofUnproven = "unproven" // the relay's COUNT says more than paging (even again) yields
)

// maxRepages bounds how often a range whose COUNT disagrees is paged again.
const maxRepages = 2

// tally counts the distinct ids one shard's pages fetched in [Since, top]
// with O(page) memory: pages only overlap in the second at the cursor, so
// only that second's ids are kept.
type tally struct {
	top      int64 // the cursor this run started the shard at
	held     int64
	boundary int64 // the cursor second
	ids      map[[32]byte]bool
}

func newTally(top int64) *tally {
	return &tally{top: top, boundary: top, ids: map[[32]byte]bool{}}
}

// add counts a page asked for [since, cursor] with its malformed frames:
// those are what the relay served, and its COUNT counts them too (a copy
// across two pages may count twice: malformed frames are no events to
// lose).
func (t *tally) add(since, cursor int64, items []Item, malformed int) {
	t.held += int64(malformed)
	if cursor < t.boundary { // the cursor moved past the boundary second
		t.boundary, t.ids = cursor, map[[32]byte]bool{}
	}
	oldest := t.boundary
	page := make(map[[32]byte]bool, len(items))
	for _, it := range items {
		if it.CreatedAt > cursor || it.CreatedAt < since || page[it.ID] || it.CreatedAt == t.boundary && t.ids[it.ID] {
			continue
		}
		page[it.ID] = true
		t.held++
		oldest = min(oldest, it.CreatedAt)
	}
	if oldest < t.boundary {
		t.boundary, t.ids = oldest, map[[32]byte]bool{}
	}
	for _, it := range items {
		if it.CreatedAt == t.boundary && page[it.ID] {
			t.ids[it.ID] = true
		}
	}
}

// addIDs counts a wall's ids, if the tally is at that second.
func (t *tally) addIDs(second int64, ids map[[32]byte]bool) {
	if t.boundary != second {
		return
	}
	for x := range ids {
		if !t.ids[x] {
			t.ids[x] = true
			t.held++
		}
	}
}

// tally counts a page of shard s (as it stood when the page was asked)
// and shows its authors to the known-author set.
func (r *relayCrawl) tally(s shard.Shard, items []Item, malformed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.known.observe(items)
	t := r.tallies[s.ID]
	if t == nil {
		t = newTally(s.Cursor)
		r.tallies[s.ID] = t
	}
	t.add(s.Since, s.Cursor, items, malformed)
}

// tallyIDs counts a wall's ids into shard id's tally.
func (r *relayCrawl) tallyIDs(id string, second int64, ids map[[32]byte]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.tallies[id]; t != nil {
		t.addIDs(second, ids)
	}
}

// observeAuthors shows items' authors to the known-author set.
func (r *relayCrawl) observeAuthors(items []Item) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.known.observe(items)
}

// audit checks every range this run paged against the relay's NIP-45
// COUNT (with the job's filter), pages again a range that holds fewer than
// the relay counts (up to maxRepages times), and records how each range
// stands. Ranges finished by an earlier run are recorded as paged.
func (r *relayCrawl) audit(ctx context.Context) []RangeCoverage {
	r.mu.Lock()
	if len(r.tallies) == 0 {
		r.mu.Unlock()
		return nil // nothing paged this run: the record keeps what it had
	}
	shards := r.queue.Shards()
	type rng struct {
		since, until int64
		held         int64
		earlier      bool
	}
	var todo []rng
	for _, s := range shards {
		if t := r.tallies[s.ID]; t != nil {
			todo = append(todo, rng{s.Since, t.top, t.held, false})
		} else {
			todo = append(todo, rng{s.Since, s.Until, 0, true})
		}
	}
	r.mu.Unlock()
	now := r.c.opts.Now().Unix()
	var out []RangeCoverage
	for _, g := range todo {
		if ctx.Err() != nil {
			break
		}
		c := RangeCoverage{Since: g.since, Until: g.until, Held: g.held, Proof: ProofPaged, At: now}
		if g.until == shard.OpenTop {
			c.Until = 0
		}
		switch {
		case g.earlier:
			c.Why = "paged by an earlier run"
		case !r.count:
			c.Why = "the relay answers no COUNT"
		default:
			r.checkRange(ctx, &c, g.since, g.until)
		}
		out = append(out, c)
	}
	return out
}

// checkRange compares c's held count with the relay's COUNT for [since,
// until], paging the range again while it is short. The ids of the
// passes again are kept (up to maxUnion), so that a relay dropping other
// events each pass is read whole by their union.
func (r *relayCrawl) checkRange(ctx context.Context, c *RangeCoverage, since, until int64) {
	union := map[[32]byte]bool{}
	for {
		n, ok := r.countEvents(ctx, since, until)
		if !ok {
			c.Why = "the relay's COUNT failed"
			return
		}
		c.Count = n
		if c.Held >= n {
			c.Proof = ProofCount
			return
		}
		if c.Repaged >= maxRepages {
			c.Proof = ProofUnproven
			c.Why = fmt.Sprintf("the relay counts %d events, paging %d times yielded %d: it serves fewer than it holds", n, c.Repaged+1, c.Held)
			return
		}
		c.Repaged++
		err := r.repage(ctx, since, until, union)
		c.Held = max(c.Held, int64(len(union)))
		r.log.Info("range short of COUNT; paged again", zap.Int64("since", since), zap.Int64("until", until),
			zap.Int64("count", n), zap.Int64("held", c.Held), zap.Error(err))
		if err != nil {
			c.Proof, c.Why = ProofUnproven, fmt.Sprintf("paging again: %v", err)
			return
		}
	}
}

// maxUnion bounds the ids kept while a short range is paged again.
const maxUnion = 1 << 20

// repage pages [since, until] newest-first again without moving any
// shard's cursor, completing walls on the way, and adds the distinct ids
// it fetched in range to union (while it has room).
func (r *relayCrawl) repage(ctx context.Context, since, until int64, union map[[32]byte]bool) error {
	cursor := until
	failures, slowdowns := 0, 0
	add := func(id [32]byte) {
		if len(union) < maxUnion {
			union[id] = true
		}
	}
	for cursor >= since {
		page, pc, err := r.fetch(ctx, r.filter(since, cursor, nil, nil))
		if err != nil {
			return err
		}
		if !r.usable(ctx, pc, page, &failures, &slowdowns, fmt.Sprintf("re-page until=%d", cursor)) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		failures, slowdowns = 0, 0
		n, frames, oldest := 0, 0, cursor
		distinct := map[[32]byte]bool{}
		for _, it := range page.Items {
			if it.CreatedAt < since || it.CreatedAt > cursor {
				continue
			}
			frames++
			if !distinct[it.ID] {
				distinct[it.ID] = true
				add(it.ID)
				n++
				oldest = min(oldest, it.CreatedAt)
			}
		}
		malformed := r.malformed(pc, page)
		for _, m := range malformed {
			// The relay's COUNT counts what it serves as malformed too.
			key := m.Key
			if key == nil {
				key = m.Raw
			}
			add(sha256.Sum256(key))
		}
		if _, err := r.c.opts.Store.Ingest(&rawstore.Batch{Relay: r.idx, Events: copies(page.Items), Malformed: malformed}); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		r.c.opts.OnCommit()
		switch {
		case n == 0:
			return nil
		case oldest < cursor:
			cursor = oldest
		default:
			if r.full(n, frames) {
				ids, err := r.completeWall(ctx, cursor)
				if err != nil {
					return err
				}
				for id := range ids {
					add(id)
				}
			}
			cursor--
		}
	}
	return nil
}

func copies(items []Item) []rawstore.Copy {
	out := make([]rawstore.Copy, len(items))
	for i, it := range items {
		out[i] = rawstore.Copy{ID: it.ID, Raw: it.Raw}
	}
	return out
}

// retryWalls runs the walls still incomplete once more, now that the whole
// range is paged: the known-author set then holds every author the relay
// showed anywhere.
func (r *relayCrawl) retryWalls(ctx context.Context) {
	r.mu.Lock()
	var seconds []int64
	for _, w := range r.rec.Walls {
		if !w.Complete {
			seconds = append(seconds, w.Second)
		}
	}
	r.mu.Unlock()
	slices.Sort(seconds)
	for _, s := range seconds {
		if ctx.Err() != nil {
			return
		}
		if _, err := r.completeWall(ctx, s); err != nil {
			r.log.Info("wall retry failed", zap.Int64("second", s), zap.Error(err))
		}
	}
}
