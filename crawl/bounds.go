package crawl

import (
	"context"
	"math"

	"go.uber.org/zap"
)

// bounds is how a relay reads a filter's since and until. NIP-01 makes
// both inclusive, but nostr-rs-relay (before mid 2023) and relayer answer
// since < created_at < until, and others read until as exclusive. Paging
// with an exclusive until silently loses the rest of every second a page
// was cut in (the next page asks until = that second), so the crawl asks
// one second wider on each side the relay excludes.
type bounds struct {
	sinceExclusive, untilExclusive bool
}

// String names the relay's reading, as recorded ("" for NIP-01's).
func (b bounds) String() string {
	switch {
	case b.sinceExclusive && b.untilExclusive:
		return "since < created_at < until"
	case b.sinceExclusive:
		return "since < created_at <= until"
	case b.untilExclusive:
		return "since <= created_at < until"
	}
	return ""
}

// widen returns the since and until to send for the range [since, until]
// (nil: unbounded), so that the relay's reading of them covers it.
func (b bounds) widen(since, until *int64) (*int64, *int64) {
	if since != nil && b.sinceExclusive {
		if *since <= 0 {
			since = nil // nothing is older than 0: no bound at all
		} else {
			s := *since - 1
			since = &s
		}
	}
	if until != nil && b.untilExclusive && *until < math.MaxInt64 {
		u := *until + 1
		until = &u
	}
	return since, until
}

// learnBounds finds how the relay reads since and until from its newest
// event (of the job's filter): asked for that event's second alone, a
// relay reading NIP-01's way serves it; one that does not is asked again
// one second wider on either side, then both. A relay that serves nothing
// to learn from is taken at NIP-01's word.
func (r *relayCrawl) learnBounds(ctx context.Context) {
	page, _, err := r.fetch(ctx, r.c.opts.jobFilter(nil, nil, 1).bytes())
	if err != nil || page.End != EndEOSE || len(page.Items) == 0 {
		return
	}
	second := page.Items[0].CreatedAt
	serves := func(since, until int64) bool {
		page, _, err := r.fetch(ctx, r.c.opts.jobFilter(&since, &until, 1).bytes())
		if err != nil || page.End != EndEOSE {
			return false
		}
		for _, it := range page.Items {
			if it.CreatedAt == second {
				return true
			}
		}
		return false
	}
	var b bounds
	switch {
	case serves(second, second):
		return
	case serves(second, second+1):
		b.untilExclusive = true
	case serves(second-1, second):
		b.sinceExclusive = true
	case serves(second-1, second+1):
		b.sinceExclusive, b.untilExclusive = true, true
	default:
		r.log.Warn("the relay serves its newest event to no filter naming its second; taking since and until as NIP-01 says", zap.Int64("second", second))
		return
	}
	r.log.Info("the relay reads since and until its own way; asking one second wider", zap.Stringer("reads", b))
	r.mu.Lock()
	r.bounds, r.rec.Bounds = b, b.String()
	r.mu.Unlock()
}

// jobFilter is the job's filter for [since, until] (nil: unbounded) as
// this relay must be asked for it.
func (r *relayCrawl) jobFilter(since, until *int64, limit int) filterJSON {
	r.mu.Lock()
	b := r.bounds
	r.mu.Unlock()
	since, until = b.widen(since, until)
	return r.c.opts.jobFilter(since, until, limit)
}
