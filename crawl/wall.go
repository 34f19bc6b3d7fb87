package crawl

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nostr-archiver/archiver/adaptive"
	"github.com/nostr-archiver/archiver/relayconn"
	"github.com/nostr-archiver/archiver/shard"
	"go.uber.org/zap"
)

// completeWall fetches every event of one created_at second that holds
// more events than a page, running wallSteps in order until the second is
// proven complete: the relay's NIP-45 COUNT for it matches the distinct ids
// fetched, or (without COUNT) the whole second fit in one page. REQ can
// only name kinds, authors and tag values some answer showed, so each step
// widens what is named. What stays unproven is reported with why.
func (r *relayCrawl) completeWall(ctx context.Context, second int64) error {
	w := &wallRun{plan: shard.NewWallPlan(second, shard.DefaultMaxAuthors), ids: map[[32]byte]bool{},
		tags: map[string]map[string]bool{}, count: -1}
	// The whole second once, to learn its kinds (the page that found the
	// wall may have been from a wider filter).
	full, _, err := w.query(ctx, r, r.filterJSON(second, second, nil, nil))
	if err != nil {
		return err
	}
	w.full = full
	noCount := "the relay answers no COUNT"
	if r.count {
		switch c, ok := r.countEvents(ctx, second, second); {
		case !ok:
			noCount = whyCountFailed
		case !c.proves():
			noCount = whyCountApprox + fmt.Sprintf(" (about %d)", c.n)
		case c.n < int64(len(w.ids)):
			// It counts fewer than the second's first page held: it
			// undercounts (see servedOver) and proves nothing.
			noCount = fmt.Sprintf("the relay's COUNT (%d) is below what one page of the second held (%d)", c.n, len(w.ids))
		default:
			w.count = c.n
			w.plan.SetTotal(c.n)
		}
	}
	var methods []string
	for _, step := range wallSteps {
		if w.proven() {
			break
		}
		if step.when != nil && !step.when(r) {
			continue
		}
		methods = append(methods, step.name)
		if err := step.run(ctx, r, w); err != nil {
			return err
		}
	}
	report := WallReport{Second: second, Events: len(w.ids) + w.negFetched, Complete: w.proven(), Method: strings.Join(methods, "+")}
	if report.Method == "" {
		report.Method = "page"
	}
	if w.count >= 0 {
		report.Count = w.count
	}
	if !report.Complete {
		for _, l := range w.plan.Status().Unsplittable {
			report.Unsplit = append(report.Unsplit, fmt.Sprintf("kind %d author %s", l.Kind, l.Authors[0]))
		}
		report.Unsplit = append(report.Unsplit, w.unsplit...)
		if w.count >= 0 {
			report.Unsplit = append(report.Unsplit, fmt.Sprintf("COUNT says %d, fetched %d", w.count, len(w.ids)))
		} else {
			report.Unsplit = append(report.Unsplit, "kinds and authors not shown by a full page cannot be listed over REQ, and "+noCount)
		}
	}
	r.log.Info("wall", zap.Int64("second", second), zap.Int("events", report.Events),
		zap.Bool("complete", report.Complete), zap.String("method", report.Method), zap.Strings("unsplit", report.Unsplit))
	r.mu.Lock()
	r.rec.Walls = slices.DeleteFunc(r.rec.Walls, func(x WallReport) bool { return x.Second == second })
	r.rec.Walls = append(r.rec.Walls, report)
	r.mu.Unlock()
	return nil
}

// wallStep is one way of listing a wall second's events. Steps run in
// order, each only while the second is not yet proven complete.
type wallStep struct {
	name string
	run  func(ctx context.Context, r *relayCrawl, w *wallRun) error
	when func(r *relayCrawl) bool // nil: always
}

// wallSteps, cheapest first; a step whose when is false for the relay is
// skipped.
var wallSteps = []wallStep{
	{name: "kind+author", run: splitStep},
	{name: "known-authors", run: knownStep},
	{name: "tags", run: tagStep},
	{name: "nip77", run: negStep, when: func(r *relayCrawl) bool { return r.nip77 }},
}

// negStep reconciles the second over NIP-77: the archive fetches by id what
// it lacks, and a reconciliation that leaves nothing missing proves the
// second held whatever COUNT says.
func negStep(ctx context.Context, r *relayCrawl, w *wallRun) error {
	ok, n, err := r.negWall(ctx, w.plan.Second())
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		w.unsplit = append(w.unsplit, "NIP-77: "+err.Error())
	default:
		w.reconciled, w.negFetched = ok, n
	}
	return nil
}

// wallRun is one wall's state across its steps.
type wallRun struct {
	plan    *shard.WallPlan
	ids     map[[32]byte]bool          // distinct ids fetched for the second
	tags    map[string]map[string]bool // tag letter -> values seen on the second's events
	nTags   int
	full    bool  // the whole second came back full
	count   int64 // the relay's COUNT for the second, -1 if unknown
	unsplit []string
	// reconciled: a NIP-77 reconciliation of the second left nothing
	// missing; negFetched ids it fetched.
	reconciled bool
	negFetched int
}

// proven reports whether every event of the second is held: as many
// distinct ids as the relay counts, or, without a count, a whole-second
// page that was not full. A count the ids served exceed undercounts (see
// servedOver) and is no count.
func (w *wallRun) proven() bool {
	if w.reconciled {
		return true
	}
	if n := int64(len(w.ids)); w.count >= 0 && n <= w.count {
		return n == w.count
	}
	return !w.full
}

// splitStep runs the plan's leaves: by kind, then by the authors seen,
// down to single authors.
func splitStep(ctx context.Context, r *relayCrawl, w *wallRun) error {
	second := w.plan.Second()
	for leaves := w.plan.Next(); len(leaves) > 0; leaves = w.plan.Next() {
		for _, l := range leaves {
			var kinds []int
			if l.Kind >= 0 {
				kinds = []int{l.Kind}
			}
			lfull, n, err := w.query(ctx, r, r.filterJSON(second, second, kinds, l.Authors))
			if err != nil {
				return err
			}
			if err := w.plan.Report(l, lfull, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// knownStep offers the plan every author the archive knows as a candidate
// under each kind of the second: authors no full page showed usually
// write elsewhere on the relay. A wrong guess costs part of a query.
func knownStep(ctx context.Context, r *relayCrawl, w *wallRun) error {
	known := r.knownAuthorList()
	for _, kind := range w.plan.Kinds() {
		for _, a := range known {
			w.plan.Observe(kind, a)
		}
	}
	return splitStep(ctx, r, w)
}

// maxWallTagValues bounds the tag values a wall is split by.
const maxWallTagValues = 1000

// tagStep splits the second by the tag values (#e, #p, #t) its events
// showed, in groups of up to DefaultMaxAuthors values, halving a group
// that comes back full down to one value; what it reveals feeds the plan.
func tagStep(ctx context.Context, r *relayCrawl, w *wallRun) error {
	second := w.plan.Second()
	for _, letter := range slices.Sorted(maps.Keys(w.tags)) {
		values := slices.Sorted(maps.Keys(w.tags[letter]))
		var groups [][]string
		for i := 0; i < len(values); i += shard.DefaultMaxAuthors {
			groups = append(groups, values[i:min(i+shard.DefaultMaxAuthors, len(values))])
		}
		for len(groups) > 0 && !w.proven() {
			g := groups[0]
			groups = groups[1:]
			full, _, err := w.query(ctx, r, r.filterJSON(second, second, nil, nil).withTag(letter, g))
			if err != nil {
				return err
			}
			switch {
			case !full:
			case len(g) > 1:
				groups = append(groups, g[:len(g)/2], g[len(g)/2:])
			default:
				w.unsplit = append(w.unsplit, fmt.Sprintf("tag #%s=%s still fills a page", letter, g[0]))
			}
		}
	}
	return splitStep(ctx, r, w)
}

// query runs one sub-query of the wall, retrying failed pages, commits
// what it returns, shows the plan the kinds and authors it revealed (and
// the run the tag values), and reports whether its page was full and how
// many distinct events of the second it returned.
func (w *wallRun) query(ctx context.Context, r *relayCrawl, fj filterJSON) (bool, int, error) {
	second := w.plan.Second()
	f := fj.bytes()
	failures, slowdowns := 0, 0
	for {
		page, pc, err := r.fetch(ctx, f)
		if err != nil {
			return false, 0, err
		}
		if !r.usable(ctx, pc, page, &failures, &slowdowns, fmt.Sprintf("wall %d sub-query", second)) {
			if _, err := r.commit(page.Items, r.malformed(pc, page), nil); err != nil {
				return false, 0, err
			}
			if ctx.Err() != nil {
				return false, 0, ctx.Err()
			}
			continue
		}
		n, frames := 0, 0
		distinct := make(map[[32]byte]bool, len(page.Items))
		for _, it := range page.Items {
			if it.CreatedAt != second {
				continue
			}
			frames++
			if distinct[it.ID] {
				continue
			}
			distinct[it.ID] = true
			n++
			w.ids[it.ID] = true
			w.observe(it.Raw)
		}
		r.observeAuthors(page.Items)
		if _, err := r.commit(page.Items, r.malformed(pc, page), nil); err != nil {
			return false, 0, err
		}
		return page.End == relayconn.EndOverflow || r.full(n, frames), n, nil
	}
}

// observe shows the plan an event's kind and author and keeps its e, p
// and t tag values (up to maxWallTagValues).
func (w *wallRun) observe(raw []byte) {
	var head struct {
		Kind   int        `json:"kind"`
		PubKey string     `json:"pubkey"`
		Tags   [][]string `json:"tags"`
	}
	if json.Unmarshal(raw, &head) != nil {
		return
	}
	w.plan.Observe(head.Kind, head.PubKey)
	for _, t := range head.Tags {
		if len(t) < 2 || (t[0] != "e" && t[0] != "p" && t[0] != "t") || w.nTags >= maxWallTagValues {
			continue
		}
		if w.tags[t[0]] == nil {
			w.tags[t[0]] = map[string]bool{}
		}
		if !w.tags[t[0]][t[1]] {
			w.tags[t[0]][t[1]] = true
			w.nTags++
		}
	}
}

// relayCount is a relay's NIP-45 COUNT for a range.
type relayCount struct {
	n int64
	// approximate: the relay says n is not exact (NIP-45 "approximate",
	// strfry's "limited"; archiver serve past its cap). It may be below
	// what the relay holds: it sizes plans and never proves a range or a
	// wall.
	approximate bool
}

// proves reports whether c may prove what is held against it.
func (c relayCount) proves() bool { return !c.approximate }

// whyNoCount is why a range or wall had no count to be proven by.
const (
	whyCountFailed = "the relay's COUNT failed"
	whyCountApprox = "the relay's COUNT is approximate"
)

// countEvents asks the relay's NIP-45 COUNT how many events [since, until]
// holds. A NOTICE, a timeout, a lost connection or a rate limit is
// retried, as a page would be, up to countAttempts times; ok is false when
// the relay gave no count (it refused COUNT, or kept failing), and the
// caller does without. A failed COUNT never ends the crawl.
func (r *relayCrawl) countEvents(ctx context.Context, since, until int64) (c relayCount, ok bool) {
	f := r.rangeFilter(since, until, 0).bytes()
	for failures := 0; ; {
		pc, err := r.conns.acquire(ctx)
		if err != nil {
			return c, false
		}
		page, err := pc.c.Count(ctx, f, r.c.opts.PageTimeout)
		r.conns.release(pc)
		if err != nil {
			return c, false
		}
		switch page.End {
		case relayconn.EndEOSE:
			return relayCount{n: page.Count, approximate: page.CountApproximate}, true
		case relayconn.EndClosed:
			act, _ := classify(page.Reason)
			if act == actAuth && r.c.opts.AuthKeys.For(r.url) != nil && !page.SentAuthed {
				if sent, err := pc.c.Authenticate(ctx, r.c.opts.AuthKeys.For(r.url), r.c.opts.PageTimeout); err == nil {
					if sent {
						r.noteAuth()
					}
					continue // re-send the COUNT, authenticated
				}
			}
			if act != actBackoff {
				return c, false
			}
			r.refusal("rate-limited", adaptive.RateLimited)
		default:
			r.transient(pc, page, failures)
		}
		failures++
		r.log.Debug("COUNT failed; retrying", zap.Int64("since", since), zap.Int64("until", until),
			zap.Stringer("end", page.End), zap.String("reason", page.Reason), zap.Int("attempt", failures))
		if failures >= countAttempts || r.c.backoff(ctx, failures) != nil {
			return c, false
		}
	}
}

// countAttempts bounds the tries of one COUNT: a count only sharpens a plan
// or proves a wall, so a relay that keeps failing it is done without.
const countAttempts = 3
