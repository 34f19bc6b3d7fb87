package crawl

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"go.uber.org/zap"
)

// completeWall fetches every event of one created_at second that holds
// more events than a page, by splitting the second: first by kind, then a
// kind that is still full by groups of the authors seen, halving the
// groups until each comes back short. A single author of a single kind
// that is still full cannot be split by REQ and is reported. Where the
// relay answers NIP-45 COUNT, the total is checked against it.
func (r *relayCrawl) completeWall(ctx context.Context, second int64) error {
	w := wallSplit{second: second, ids: map[[32]byte]bool{}, kinds: map[int]map[string]bool{}}
	// The whole second once, to learn its kinds (the page that found the
	// wall may have been from a wider filter).
	full, err := w.query(ctx, r, wallQuery{})
	if err != nil {
		return err
	}
	report := WallReport{Second: second, Method: "kind", Complete: true}
	// The kinds (and below, the authors of a kind) come from full pages,
	// which may not show them all: REQ cannot list what it never returned,
	// so a split of a full page covers the second only if COUNT says so.
	enumerated := !full
	queue := make([]wallQuery, 0, len(w.kinds))
	for _, k := range sortedKeys(w.kinds) {
		queue = append(queue, wallQuery{kind: k, byKind: true})
	}
	for len(queue) > 0 {
		q := queue[0]
		queue = queue[1:]
		full, err := w.query(ctx, r, q)
		if err != nil {
			return err
		}
		if !full {
			continue
		}
		switch {
		case q.authors == nil:
			report.Method = "kind+author"
			authors := sortedKeys(w.kinds[q.kind])
			queue = append(queue, wallQuery{kind: q.kind, byKind: true, authors: authors})
		case len(q.authors) > 1:
			h := len(q.authors) / 2
			queue = append(queue,
				wallQuery{kind: q.kind, byKind: true, authors: q.authors[:h]},
				wallQuery{kind: q.kind, byKind: true, authors: q.authors[h:]})
		default:
			report.Complete = false
			report.Unsplit = append(report.Unsplit, fmt.Sprintf("kind %d author %s", q.kind, q.authors[0]))
		}
	}
	report.Events = len(w.ids)
	if r.count {
		if n, ok := r.countSecond(ctx, second); ok {
			report.Count = n
			enumerated = true
			if n > int64(report.Events) {
				report.Complete = false
				report.Unsplit = append(report.Unsplit, fmt.Sprintf("COUNT says %d, fetched %d", n, report.Events))
			}
		}
	}
	if !enumerated {
		report.Complete = false
		report.Unsplit = append(report.Unsplit, "kinds and authors not shown by a full page cannot be listed over REQ, and the relay answers no COUNT")
	}
	r.log.Info("wall", zap.Int64("second", second), zap.Int("events", report.Events),
		zap.Bool("complete", report.Complete), zap.String("method", report.Method), zap.Strings("unsplit", report.Unsplit))
	r.mu.Lock()
	r.rec.Walls = slices.DeleteFunc(r.rec.Walls, func(x WallReport) bool { return x.Second == second })
	r.rec.Walls = append(r.rec.Walls, report)
	r.mu.Unlock()
	return nil
}

type wallQuery struct {
	byKind  bool
	kind    int
	authors []string
}

type wallSplit struct {
	second int64
	ids    map[[32]byte]bool
	kinds  map[int]map[string]bool // kind -> authors seen at this second
}

// query runs one sub-query of the wall (retrying failed pages), commits
// what it returns, and reports whether its page was full, so that it must
// be split further.
func (w *wallSplit) query(ctx context.Context, r *relayCrawl, q wallQuery) (bool, error) {
	var kinds []int
	if q.byKind {
		kinds = []int{q.kind}
	}
	f := r.filter(w.second, w.second, kinds, q.authors)
	failures, slowdowns := 0, 0
	for {
		page, pc, err := r.fetch(ctx, f)
		if err != nil {
			return false, err
		}
		if !r.usable(ctx, pc, page, &failures, &slowdowns, fmt.Sprintf("wall %d sub-query", w.second)) {
			if _, err := r.commit(page.Items, r.malformed(pc, page), nil); err != nil {
				return false, err
			}
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			continue
		}
		n := 0
		for _, it := range page.Items {
			if it.CreatedAt != w.second {
				continue
			}
			n++
			w.ids[it.ID] = true
			var head struct {
				Kind   int    `json:"kind"`
				PubKey string `json:"pubkey"`
			}
			if json.Unmarshal(it.Raw, &head) == nil {
				if w.kinds[head.Kind] == nil {
					w.kinds[head.Kind] = map[string]bool{}
				}
				w.kinds[head.Kind][head.PubKey] = true
			}
		}
		if _, err := r.commit(page.Items, r.malformed(pc, page), nil); err != nil {
			return false, err
		}
		return page.End == EndOverflow || r.full(n), nil
	}
}

// countSecond asks NIP-45 COUNT for one second; ok is false when the
// relay does not answer it.
func (r *relayCrawl) countSecond(ctx context.Context, second int64) (int64, bool) {
	pc, err := r.conns.acquire(ctx)
	if err != nil {
		return 0, false
	}
	defer r.conns.release(pc)
	f := filterJSON{Kinds: r.c.opts.Kinds, Since: &second, Until: &second}.bytes()
	page, err := pc.c.Count(ctx, f, r.c.opts.PageTimeout)
	if err != nil || page.End != EndEOSE {
		return 0, false
	}
	return page.Count, true
}

func sortedKeys[K int | string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
