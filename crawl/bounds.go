package crawl

import (
	"context"
	"math"

	"github.com/nostr-archiver/archiver/relayconn"
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

// learnBounds finds how the relay reads since and until (probeBounds,
// over the crawl's connections and with the job's filter) and records it.
func (r *relayCrawl) learnBounds(ctx context.Context) {
	b, ok := probeBounds(func(since, until *int64) ([]*relayconn.Item, bool) {
		page, _, err := r.fetch(ctx, r.c.opts.jobFilter(since, until, 1).bytes())
		return itemsOf(page, err)
	}, r.log)
	if !ok {
		return
	}
	r.mu.Lock()
	r.bounds, r.rec.Bounds = b, b.String()
	r.mu.Unlock()
}

// itemsOf is what a probe's page yielded, if it ended as a page should.
func itemsOf(page *relayconn.Page, err error) ([]*relayconn.Item, bool) {
	if err != nil || page.End != relayconn.EndEOSE {
		return nil, false
	}
	out := make([]*relayconn.Item, len(page.Items))
	for i := range page.Items {
		out[i] = &page.Items[i]
	}
	return out, true
}

// probeBounds finds how a relay reads since and until from its newest
// event (ask(nil, nil)): asked for that event's second alone, a relay
// reading NIP-01's way serves it; one that does not (three times) is
// asked again one second wider on either side, then both. ok is false when the relay
// served nothing to learn from, or its newest event to no filter naming
// its second: then it is taken at NIP-01's word.
func probeBounds(ask func(since, until *int64) ([]*relayconn.Item, bool), log *zap.Logger) (b bounds, ok bool) {
	newest, ok := ask(nil, nil)
	if !ok || len(newest) == 0 {
		return bounds{}, false
	}
	second := newest[0].CreatedAt
	serves := func(since, until int64) bool {
		items, _ := ask(&since, &until)
		for _, it := range items {
			if it.CreatedAt == second {
				return true
			}
		}
		return false
	}
	// NIP-01's reading is asked for up to three times before another is
	// tried: a relay that sent an answer's EOSE before its event (the
	// event then comes late) would be taken for one that reads until
	// exclusively, and every window asked for one second wider shows the
	// order check the wrong event.
	for range 3 {
		if serves(second, second) {
			return bounds{}, false
		}
	}
	switch {
	case serves(second, second+1):
		b.untilExclusive = true
	case serves(second-1, second):
		b.sinceExclusive = true
	case serves(second-1, second+1):
		b.sinceExclusive, b.untilExclusive = true, true
	default:
		log.Warn("the relay serves its newest event to no filter naming its second; taking since and until as NIP-01 says", zap.Int64("second", second))
		return bounds{}, false
	}
	log.Info("the relay reads since and until its own way; asking one second wider", zap.Stringer("reads", b))
	return b, true
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
