package crawl

import (
	"context"
	"errors"
	"fmt"
	"github.com/nostr-archiver/archiver/rawstore"

	"go.uber.org/zap"
)

// pageShard pages s newest-first until it is done, the relay's crawl
// ends, or ctx is cancelled. Every page is committed with the cursor it
// advances; a failed page is retried from the same cursor, never taken for
// the end of the shard.
func (r *relayCrawl) pageShard(ctx context.Context, job *jobState, s *shardState) {
	log := r.log.With(zap.String("shard", s.key))
	failures := 0
	for !s.Done && ctx.Err() == nil {
		page, conn, err := r.fetch(ctx, r.filter(s.Since, s.Cursor, nil, nil))
		if err != nil {
			return
		}
		if !r.usable(ctx, conn, page, &failures, fmt.Sprintf("shard %s page until=%d", s.ID, s.Cursor)) {
			// Keep whatever arrived before the failure; the cursor stays.
			if err := r.commit(page.Items, r.malformed(conn, page), nil); err != nil {
				r.fail(FinishGaveUp, "store: "+err.Error())
			}
			continue
		}
		failures = 0
		if err := r.advance(ctx, conn, s, page); err != nil {
			if ctx.Err() == nil {
				r.fail(FinishGaveUp, fmt.Sprintf("shard %s: %v", s.ID, err))
			}
			return
		}
		log.Debug("page", zap.Int("events", len(page.Items)), zap.Int64("cursor", s.Cursor), zap.Duration("latency", page.Latency))
	}
}

// fetch sends one REQ on the relay's connection.
func (r *relayCrawl) fetch(ctx context.Context, filter []byte) (*Page, *Conn, error) {
	conn, err := r.conns.get(ctx)
	if err != nil {
		if errors.Is(err, errUnreachable) {
			r.fail(FinishUnreachable, err.Error())
		}
		return nil, nil, err
	}
	page, err := conn.Req(ctx, filter, r.limit, r.c.opts.PageTimeout)
	if err != nil {
		return nil, nil, err
	}
	r.mu.Lock()
	r.rec.Pages++
	r.mu.Unlock()
	return page, conn, nil
}

// usable reports whether page can advance a cursor. For a page that
// cannot, it records the refusal, backs off, and ends the relay's crawl
// when the refusal is final or the page failed too often.
func (r *relayCrawl) usable(ctx context.Context, conn *Conn, page *Page, failures *int, what string) bool {
	switch page.End {
	case EndEOSE, EndOverflow:
		return true
	case EndClosed:
		act, prefix := classify(page.Reason)
		switch act {
		case actAuth:
			r.fail(FinishAuthRequired, page.Reason)
			return false
		case actGiveUp:
			r.fail(FinishRefused, page.Reason)
			return false
		case actBackoff:
			r.refusal("rate-limited")
			*failures++
		default:
			r.refusal("closed:" + prefix)
			*failures++
		}
	case EndNotice:
		r.refusal("notice")
		*failures++
	case EndTimeout:
		r.refusal("timeout")
		*failures++
		if *failures >= 2 {
			r.conns.drop(conn) // a silent connection may be dead: redial
		}
	case EndConnLost:
		r.refusal("conn-lost")
		r.conns.drop(conn)
		*failures++
	}
	r.log.Info("page failed; retrying", zap.String("what", what), zap.Stringer("end", page.End),
		zap.String("reason", page.Reason), zap.Int("attempt", *failures))
	if *failures >= r.c.opts.MaxAttempts {
		r.fail(FinishGaveUp, fmt.Sprintf("%s failed %d times, last: %s %s", what, *failures, page.End, page.Reason))
		return false
	}
	_ = r.backoff(ctx, *failures)
	return false
}

func (r *relayCrawl) malformed(conn *Conn, page *Page) []rawstore.Malformed {
	return append(page.Malformed, conn.TakeOrphans()...)
}

// advance moves s's cursor past page and commits both.
func (r *relayCrawl) advance(ctx context.Context, conn *Conn, s *shardState, page *Page) error {
	var n, newer, older int
	oldest := s.Cursor + 1
	for _, it := range page.Items {
		switch {
		case it.CreatedAt > s.Cursor:
			newer++
		case it.CreatedAt < s.Since:
			older++
		default:
			n++
			oldest = min(oldest, it.CreatedAt)
		}
	}
	r.mu.Lock()
	r.rec.OutOfRange += int64(newer + older)
	if page.End == EndEOSE && n > r.rec.EffectiveLimit {
		r.rec.EffectiveLimit = n
	}
	r.mu.Unlock()
	malformed := r.malformed(conn, page)

	switch {
	case n == 0 && older == 0 && r.full(newer):
		// A full page of events newer than until: the relay ignores
		// until, so newest-first paging cannot move. (A few stray newer
		// events on an otherwise empty page are just the end.) Keep what
		// came, say why.
		if err := r.commit(page.Items, malformed, nil); err != nil {
			return err
		}
		r.fail(FinishUnpageable, fmt.Sprintf("asked until=%d, got %d newer events and none in range: the relay ignores until", s.Cursor, newer))
		return nil
	case n == 0:
		s.Done = true // a page with nothing in range is the end
	case oldest < s.Cursor:
		// Next page repeats the oldest second (inclusive until): the
		// relay may have cut the page inside it. Ids dedup the overlap.
		s.Cursor = oldest
	default:
		// Every event is at the cursor second. If the page was full, that
		// second may hold more than a page: a wall.
		if r.full(n) {
			if err := r.commit(page.Items, malformed, nil); err != nil {
				return err
			}
			page.Items, malformed = nil, nil
			if err := r.completeWall(ctx, s.Cursor); err != nil {
				return err
			}
		}
		s.Cursor--
	}
	if s.Cursor < s.Since {
		s.Done = true
	}
	return r.commit(page.Items, malformed, s)
}

// full reports whether a page of n in-range events may have been cut by
// the relay's limit. Until the relay's effective page size is known, any
// page might have been.
func (r *relayCrawl) full(n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	eff := r.rec.EffectiveLimit
	return eff == 0 || n >= eff || n >= r.limit
}

// filter renders a REQ filter for [since, until] with the job's kinds
// (or the given ones) and optional authors.
func (r *relayCrawl) filter(since, until int64, kinds []int, authors []string) []byte {
	if kinds == nil {
		kinds = r.c.opts.Kinds
	}
	return filterJSON{Kinds: kinds, Authors: authors, Since: &since, Until: &until, Limit: r.limit}.bytes()
}
