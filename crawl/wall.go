package crawl

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/nostr-archiver/archiver/adaptive"
	"github.com/nostr-archiver/archiver/shard"
	"go.uber.org/zap"
)

// completeWall fetches every event of one created_at second that holds
// more events than a page, by running shard.WallPlan's sub-queries: first
// by kind, then a kind that is still full by groups of the authors seen,
// down to single authors. A single author of a single kind that is still
// full cannot be split by REQ and is reported. REQ cannot list kinds or
// authors no full page showed, so a split wall counts as complete only
// when the relay's NIP-45 COUNT for the second agrees.
func (r *relayCrawl) completeWall(ctx context.Context, second int64) error {
	w := wallSplit{plan: shard.NewWallPlan(second, shard.DefaultMaxAuthors), ids: map[[32]byte]bool{}}
	// The whole second once, to learn its kinds (the page that found the
	// wall may have been from a wider filter).
	full, _, err := w.query(ctx, r, shard.Leaf{Kind: -1})
	if err != nil {
		return err
	}
	report := WallReport{Second: second, Method: "kind"}
	for leaves := w.plan.Next(); len(leaves) > 0; leaves = w.plan.Next() {
		for _, l := range leaves {
			if l.Authors != nil {
				report.Method = "kind+author"
			}
			lfull, n, err := w.query(ctx, r, l)
			if err != nil {
				return err
			}
			if err := w.plan.Report(l, lfull, n); err != nil {
				return err
			}
		}
	}
	report.Events = len(w.ids)
	noCount := "the relay answers no COUNT"
	if r.count {
		if n, ok := r.countEvents(ctx, second, second); ok {
			report.Count = n
			w.plan.SetTotal(n)
		} else {
			noCount = "the relay's COUNT failed"
		}
	}
	st := w.plan.Status()
	report.Complete = st.Complete && (st.Verified || !full)
	for _, l := range st.Unsplittable {
		report.Unsplit = append(report.Unsplit, fmt.Sprintf("kind %d author %s", l.Kind, l.Authors[0]))
	}
	switch {
	case st.Total >= 0 && st.Found < st.Total:
		report.Unsplit = append(report.Unsplit, fmt.Sprintf("COUNT says %d, fetched %d", st.Total, st.Found))
	case full && !st.Verified:
		report.Unsplit = append(report.Unsplit, "kinds and authors not shown by a full page cannot be listed over REQ, and "+noCount)
	}
	r.log.Info("wall", zap.Int64("second", second), zap.Int("events", report.Events),
		zap.Bool("complete", report.Complete), zap.String("method", report.Method), zap.Strings("unsplit", report.Unsplit))
	r.mu.Lock()
	r.rec.Walls = slices.DeleteFunc(r.rec.Walls, func(x WallReport) bool { return x.Second == second })
	r.rec.Walls = append(r.rec.Walls, report)
	r.mu.Unlock()
	return nil
}

type wallSplit struct {
	plan *shard.WallPlan
	ids  map[[32]byte]bool
}

// query runs one sub-query of the wall (a Leaf; Kind -1 means the whole
// second), retrying failed pages, commits what it returns, shows the plan
// the kinds and authors it revealed, and reports whether its page was full
// and how many events of the second it returned.
func (w *wallSplit) query(ctx context.Context, r *relayCrawl, l shard.Leaf) (bool, int, error) {
	second := w.plan.Second()
	var kinds []int
	if l.Kind >= 0 {
		kinds = []int{l.Kind}
	}
	f := r.filter(second, second, kinds, l.Authors)
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
		n := 0
		for _, it := range page.Items {
			if it.CreatedAt != second {
				continue
			}
			n++
			w.ids[it.ID] = true
			var head struct {
				Kind   int    `json:"kind"`
				PubKey string `json:"pubkey"`
			}
			if json.Unmarshal(it.Raw, &head) == nil {
				w.plan.Observe(head.Kind, head.PubKey)
			}
		}
		if _, err := r.commit(page.Items, r.malformed(pc, page), nil); err != nil {
			return false, 0, err
		}
		return page.End == EndOverflow || r.full(n), n, nil
	}
}

// countEvents asks the relay's NIP-45 COUNT how many events [since, until]
// holds. A NOTICE, a timeout, a lost connection or a rate limit is
// retried, as a page would be, up to countAttempts times; ok is false when
// the relay gave no count (it refused COUNT, or kept failing), and the
// caller does without. A failed COUNT never ends the crawl.
func (r *relayCrawl) countEvents(ctx context.Context, since, until int64) (n int64, ok bool) {
	f := r.c.opts.jobFilter(&since, &until, 0).bytes()
	for failures := 0; ; {
		pc, err := r.conns.acquire(ctx)
		if err != nil {
			return 0, false
		}
		page, err := pc.c.Count(ctx, f, r.c.opts.PageTimeout)
		r.conns.release(pc)
		if err != nil {
			return 0, false
		}
		switch page.End {
		case EndEOSE:
			return page.Count, true
		case EndClosed:
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
				return 0, false
			}
			r.refusal("rate-limited", adaptive.RateLimited)
		default:
			r.transient(pc, page, failures)
		}
		failures++
		r.log.Debug("COUNT failed; retrying", zap.Int64("since", since), zap.Int64("until", until),
			zap.Stringer("end", page.End), zap.String("reason", page.Reason), zap.Int("attempt", failures))
		if failures >= countAttempts || r.c.backoff(ctx, failures) != nil {
			return 0, false
		}
	}
}

// countAttempts bounds the tries of one COUNT: a count only sharpens a plan
// or proves a wall, so a relay that keeps failing it is done without.
const countAttempts = 3
