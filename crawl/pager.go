package crawl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nostr-archiver/archiver/adaptive"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/relayconn"
	"github.com/nostr-archiver/archiver/shard"
	"go.uber.org/zap"
)

// work pages shard s newest-first until it is done, the controller wants
// fewer REQs in flight (then it reports yielded, having already left the
// running count), the relay's crawl ends, or ctx is cancelled. Every page
// is committed with the cursor it advances; a failed page is retried from
// the same cursor, never taken for the end of the shard. A page's commit
// runs while the next page is fetched (see pageCommit) and is waited for
// before that page is judged, so cursors still reach disk in order.
func (r *relayCrawl) work(ctx context.Context, s shard.Shard) (yielded bool) {
	failures, slowdowns := 0, 0
	var ahead *pageCommit
	var ps pageState
	// settle waits for the commit in flight and takes the shard as the
	// queue has it (a steal may have raised its Since); false if it failed.
	settle := func() bool {
		if ahead == nil {
			return true
		}
		next, err := ahead.wait()
		ahead = nil
		if err != nil {
			if ctx.Err() == nil {
				r.fail(FinishGaveUp, fmt.Sprintf("shard %s: store: %v", s.ID, err))
			}
			return false
		}
		s = next
		return true
	}
	ps.unchecked = r.takeUnchecked(s.ID)
	release := func() {
		r.keepUnchecked(s.ID, ps.unchecked)
		r.release(s)
	}
	for !s.Done() && ctx.Err() == nil {
		if r.yield() {
			if settle() {
				release()
			}
			return true
		}
		asked := s.Since // a steal may raise s.Since while the page is in flight
		if ps.windowed = r.caught(lieUnordered); ps.windowed {
			asked = ps.win.bottom(s.Since, r.windowTop(s.Since, s.Cursor))
		}
		page, pc, err := r.fetch(ctx, r.filter(asked, s.Cursor, nil, nil))
		if !settle() {
			return false
		}
		if err != nil {
			release()
			return false
		}
		if !r.usable(ctx, pc, page, &failures, &slowdowns, fmt.Sprintf("shard %s page until=%d", s.ID, s.Cursor)) {
			// Keep whatever arrived before the failure; the cursor stays.
			if _, err := r.commit(page.Items, r.malformed(pc, page), nil); err != nil {
				r.fail(FinishGaveUp, "store: "+err.Error())
			}
			continue
		}
		failures, slowdowns = 0, 0
		next, commit, err := r.advance(ctx, pc, s, asked, page, &ps)
		if err != nil {
			if ctx.Err() == nil {
				r.fail(FinishGaveUp, fmt.Sprintf("shard %s: %v", s.ID, err))
			}
			return false
		}
		r.log.Debug("page", zap.String("shard", s.ID), zap.Int("events", len(page.Items)),
			zap.Int64("cursor", next.Cursor), zap.Duration("latency", page.Latency))
		s, ahead = next, commit
	}
	if !settle() {
		return false
	}
	switch {
	case !s.Done():
		release()
	case ps.unchecked != nil:
		// Its last full page is checked now if it was not: a relay whose
		// order breaks near a shard's end serves the rest of the shard in
		// one page that spans too little to be checked for it, and nothing
		// after. A catch marks the shard for paging again.
		r.checkLastPage(ctx, ps.unchecked)
	}
	return false
}

// pageState is what a worker carries from one page of its shard to the
// next: the window, for a relay caught sending pages that are not a
// range's newest events (windowed: this page asked for one), and the span
// of the last page (one spanning far more is checked for its order).
type pageState struct {
	win      pageWindow
	windowed bool
	span     int64
	// unchecked is the last full page if it was not checked (see
	// orderCheckDue), nil once a later full page was judged; checked when
	// the shard is done (checkLastPage), kept with the shard if it is
	// released (keepUnchecked).
	unchecked *uncheckedPage
	// empties counts the empty pages in a row at the cursor from a relay
	// caught answering pages with nothing where it holds events
	// (emptiesDoubted): asked for again up to emptyRetries times before
	// an empty page is believed.
	empties int
	// contradicted counts the empty pages in a row that emptyProbe
	// found events under on such a relay, each then asked for again.
	contradicted int
	// servedBelow is how many events the relay just served in what the
	// next page asks for: the last page's at its oldest second, where it
	// moved the cursor (asked for again: until is inclusive), or the
	// event a probe found under an empty page, where the cursor moved to.
	// That page comes back empty only from a relay that answered before
	// its events or dropped them (0: the cursor moved otherwise).
	servedBelow int
}

// pageCommit is a page's commit running while its worker fetches the
// shard's next page: storing a page takes a good part of a round trip, and
// a REQ that waited for it would leave the relay idle meanwhile. One at a
// time per worker, so a shard's cursors commit in order.
type pageCommit struct {
	done chan struct{}
	s    shard.Shard
	err  error
}

// commitAhead starts committing page items with s's cursor moved as adv
// says, and returns s as it will then stand (the queue may yet raise its
// Since: wait returns the shard as the queue has it).
func (r *relayCrawl) commitAhead(page *relayconn.Page, malformed []rawstore.Malformed, s shard.Shard, adv shardAdvance) (shard.Shard, *pageCommit) {
	c := &pageCommit{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.s, c.err = r.commit(page.Items, malformed, &adv)
		page.Release() // stored: the store keeps none of its bytes
	}()
	s.Cursor = adv.cursor
	return s, c
}

func (c *pageCommit) wait() (shard.Shard, error) {
	<-c.done
	return c.s, c.err
}

// uncheckedPage is a full page not checked for its order: the seconds it
// covered above its oldest event, (oldest, top], and how many distinct
// events it held there.
type uncheckedPage struct {
	oldest, top int64
	held        int
}

// keepUnchecked keeps p, the unchecked last full page of shard id, for
// the worker that takes the shard up next (takeUnchecked): that worker
// may see no full page of it before it ends.
func (r *relayCrawl) keepUnchecked(id string, p *uncheckedPage) {
	if p == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unchecked == nil {
		r.unchecked = map[string]uncheckedPage{}
	}
	r.unchecked[id] = *p
}

// takeUnchecked returns and forgets what keepUnchecked kept for shard id.
func (r *relayCrawl) takeUnchecked(id string) *uncheckedPage {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.unchecked[id]
	if !ok {
		return nil
	}
	delete(r.unchecked, id)
	return &p
}

// checkLastPage asks again for the events of p's seconds above its oldest:
// a relay that sends a range's newest events sends the p.held that p held
// there, fewer than a page; one that sorts them otherwise and left some
// out sends more (p held at most limit-1 of them, one being at its oldest
// second). Unlike checkOrder's one probe, this finds a page that left out
// a single event. It reports whether the relay was caught; what it sends
// is stored.
func (r *relayCrawl) checkLastPage(ctx context.Context, p *uncheckedPage) bool {
	since, until := p.oldest+1, p.top
	ids, ok := r.askAgain(ctx, since, until)
	if !ok || len(ids) <= p.held {
		return false
	}
	r.catchUnordered(fmt.Sprintf("served %d events to [%d, %d], where a full page asked for the range's newest events held %d: "+
		"its pages are not a range's newest events (it sorts them otherwise, or leaves some out)", len(ids), since, until, p.held))
	return true
}

// askAgain asks for a page of [since, until] once more, stores what comes,
// and returns the distinct ids of it in the range with their created_at;
// ok is false if the range is empty or the page failed (it shows nothing).
func (r *relayCrawl) askAgain(ctx context.Context, since, until int64) (ids map[[32]byte]int64, ok bool) {
	if since > until {
		return nil, false
	}
	page, _, err := r.fetch(ctx, r.jobFilter(&since, &until, r.limit).bytes())
	if err != nil || page.End != relayconn.EndEOSE {
		return nil, false
	}
	defer page.Release()
	if _, err := r.commit(page.Items, nil, nil); err != nil {
		r.fail(FinishGaveUp, "store: "+err.Error())
		return nil, false
	}
	ids = make(map[[32]byte]int64, len(page.Items))
	for _, it := range page.Items {
		if it.CreatedAt >= since && it.CreatedAt <= until {
			ids[it.ID] = it.CreatedAt
		}
	}
	return ids, true
}

// release hands an unfinished shard back to the queue.
func (r *relayCrawl) release(s shard.Shard) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.queue.Release(s.ID)
}

// fetch sends one REQ on a pooled connection.
func (r *relayCrawl) fetch(ctx context.Context, filter []byte) (*relayconn.Page, *poolConn, error) {
	if err := r.c.opts.Pause(ctx); err != nil {
		return nil, nil, err
	}
	pc, err := r.conns.acquire(ctx)
	if err != nil {
		if errors.Is(err, errUnreachable) {
			r.fail(FinishUnreachable, err.Error())
		}
		return nil, nil, err
	}
	pc.c.SetLinger(r.lingerFor())
	r.metrics.inflight.Inc()
	page, err := pc.c.Req(ctx, filter, r.limit, r.c.opts.PageTimeout)
	r.metrics.inflight.Dec()
	r.conns.release(pc)
	if err != nil {
		return nil, nil, err
	}
	r.storeLate(pc.c.TakeLate())
	r.metrics.page(page)
	r.mu.Lock()
	r.rec.Pages++
	r.events += int64(len(page.Items))
	r.mu.Unlock()
	return page, pc, nil
}

// storeLate stores events that came for pages already ended
// (relayconn.Conn.TakeLate) and, if they show the relay sending a page's
// events after its EOSE (sentAfterEOSE), records that it does: a page of
// such a relay can end before its events, so an empty or short one proves
// nothing, and paging proves none of its ranges.
func (r *relayCrawl) storeLate(late relayconn.Late) {
	if r.sentAfterEOSE(late) {
		r.lingerLonger()
		r.catchAfterEOSE()
	}
	if len(late.Items) == 0 {
		return
	}
	if _, err := r.commit(late.Items, nil, nil); err != nil {
		r.log.Warn("storing events that came after their page ended", zap.Int("events", len(late.Items)), zap.Error(err))
	}
}

// sentAfterEOSE reports whether late holds an event that came after the
// EOSE of a page owed more (relayconn.LateInfo.AfterEOSE) and that the
// relay cannot have taken in since: one dated more than liveMargin before
// it came. A relay sends the events published meanwhile to a subscription
// after its EOSE too, until the CLOSE reaches it: a page without until (an
// open range's, a probe of the whole relay) gets the new ones. Events
// dropped over the bounds are not known by date, and count.
func (r *relayCrawl) sentAfterEOSE(late relayconn.Late) bool {
	if late.DroppedAfterEOSE {
		return true
	}
	now, local := r.c.opts.Now(), time.Now()
	for i, in := range late.Info {
		arrived := now.Add(-local.Sub(in.Arrived)) // on the crawl's clock
		if in.AfterEOSE && late.Items[i].CreatedAt < arrived.Add(-liveMargin).Unix() {
			return true
		}
	}
	return false
}

// usable reports whether page can advance a cursor. For a page that
// cannot, it records the refusal (and tells the controller), backs off,
// and ends the relay's crawl when the refusal is final or the page failed
// too often.
func (r *relayCrawl) usable(ctx context.Context, pc *poolConn, page *relayconn.Page, failures, slowdowns *int, what string) bool {
	switch page.End {
	case relayconn.EndEOSE, relayconn.EndOverflow:
		return true
	case relayconn.EndClosed:
		act, prefix := classify(page.Reason)
		switch act {
		case actAuth:
			if r.answerAuth(ctx, pc, page) != authRetry {
				return false // re-sent at once, or the relay's crawl is over
			}
		case actGiveUp:
			if prefix == PrefixRestricted {
				r.fail(FinishRestricted, r.restrictedDetail(pc, page.Reason))
			} else {
				r.fail(FinishRefused, page.Reason)
			}
			return false
		case actBackoff:
			// The relay asked us to slow down: that is not a failure of
			// the page, so it does not count toward giving up; the
			// controller lowers concurrency and the wait grows.
			r.refusal("rate-limited", adaptive.RateLimited)
			*slowdowns++
			_ = r.c.backoff(ctx, 2+min(*slowdowns, 8))
			return false
		default:
			r.refusal("closed:"+prefix, adaptive.ClosedError)
		}
	default:
		r.transient(pc, page, *failures)
	}
	*failures++
	r.log.Info("page failed; retrying", zap.String("what", what), zap.Stringer("end", page.End),
		zap.String("reason", page.Reason), zap.Int("attempt", *failures))
	if *failures >= r.c.opts.MaxAttempts {
		r.fail(FinishGaveUp, fmt.Sprintf("%s failed %d times, last: %s %s", what, *failures, page.End, page.Reason))
		return false
	}
	_ = r.c.backoff(ctx, *failures)
	return false
}

// transient records a request that failed in a way worth retrying (a
// NOTICE, a timeout, a lost connection) after failures earlier failures:
// the refusal, the controller's signal, and a redial where the connection
// may be dead.
func (r *relayCrawl) transient(pc *poolConn, page *relayconn.Page, failures int) {
	switch page.End {
	case relayconn.EndNotice:
		r.refusal("notice", adaptive.TooManyREQs)
	case relayconn.EndTimeout:
		r.refusal("timeout", adaptive.Timeout)
		if failures >= 1 {
			r.conns.drop(pc) // a silent connection may be dead: redial
		}
	case relayconn.EndConnLost:
		r.refusal("conn-lost", adaptive.Dropped)
		r.conns.drop(pc)
	}
}

func (r *relayCrawl) malformed(pc *poolConn, page *relayconn.Page) []rawstore.Malformed {
	return toStore(append(page.Malformed, pc.c.TakeOrphans()...))
}

// toStore hands the transport's malformed frames to the store's type.
func toStore(bad []relayconn.Malformed) []rawstore.Malformed {
	if len(bad) == 0 {
		return nil
	}
	out := make([]rawstore.Malformed, len(bad))
	for i, m := range bad {
		out[i] = rawstore.Malformed{Raw: m.Raw, Reason: m.Reason, Key: m.Key}
	}
	return out
}

// advance moves s's cursor past page, asked for [asked, s.Cursor] (a
// window, if ps says so), and commits both: it returns the shard as it
// will stand and the commit, still running.
func (r *relayCrawl) advance(ctx context.Context, pc *poolConn, s shard.Shard, asked int64, page *relayconn.Page, ps *pageState) (shard.Shard, *pageCommit, error) {
	var n, frames, newer, older, stolen, stolenFrames int
	oldest := s.Cursor
	if !s.Open() {
		oldest++
	}
	// Fullness counts distinct ids: a relay that sends some events twice
	// makes frames outnumber events, and a page size learned from frames
	// would make a cut page look short.
	distinct := make(map[[32]byte]struct{}, len(page.Items))
	ats := make([]int64, 0, len(page.Items)) // in range, one per distinct id
	for _, it := range page.Items {
		switch {
		case it.CreatedAt > s.Cursor:
			newer++
		case it.CreatedAt < asked:
			older++
		case it.CreatedAt < s.Since:
			// Asked for, but a steal gave that part of the shard to
			// another worker meanwhile: stored all the same, not the
			// relay's fault, and no part of what is left of s. (Counted
			// for a window's fullness: a page cut anywhere in a window
			// may have left out any part of it.)
			stolenFrames++
			if _, dup := distinct[it.ID]; !dup {
				distinct[it.ID] = struct{}{}
				stolen++
			}
		default:
			frames++
			if _, dup := distinct[it.ID]; dup {
				continue
			}
			distinct[it.ID] = struct{}{}
			n++
			oldest = min(oldest, it.CreatedAt)
			ats = append(ats, it.CreatedAt)
		}
	}
	if n > r.limit {
		oldest = r.overLimitCursor(ats, r.limit, r.reachesLive(s.Cursor, page))
	}
	malformed := r.malformed(pc, page)
	// A page cut anywhere may have left out any part of what it was asked
	// for: the part a steal gave away meanwhile counts toward its
	// fullness too. (Counted as the shard's own, a page cut among them
	// looked short: its move was not marked as trusting the relay's
	// order, and a later catch did not page it again.)
	full := r.full(n+stolen, frames+stolenFrames)
	top := r.densityTop(s.Cursor, oldest)
	r.mu.Lock()
	r.rec.OutOfRange += int64(newer + older)
	// More than the limit asked is no page size: the relay's stores each
	// applied it (overLimitCursor).
	if page.End == relayconn.EndEOSE && min(n, r.limit) > r.rec.EffectiveLimit {
		r.rec.EffectiveLimit = min(n, r.limit)
	}
	r.ctrl.PageDone(r.c.opts.Now(), len(page.Items), page.Bytes, page.Latency)
	var expected float64 // what the density, or the plan's probes, put in this empty page's range
	switch {
	case n == 0:
		expected = max(r.density.Estimate(s.Since, top), r.occupied.Estimate(s.Since, top))
		r.density.ObservePage(s.Since, top, 0)
	case full:
		r.ctrl.PageSize(n)
		r.density.ObservePage(oldest, top, n)
	default:
		r.density.ObservePage(s.Since, top, n)
	}
	r.mu.Unlock()
	// Only the page's own malformed events: a frame no subscription can be
	// told from (an orphan) may belong to another shard's range, and the
	// relay counts no such frame as an event.
	r.tally(s, page.Items, len(page.Malformed))

	cursor, trusted := s.Cursor, false
	endTrusted := !r.caught(lieAfterEOSE) // read before judging: a catch after it adds a repage
	if n > 0 {
		ps.empties, ps.contradicted = 0, 0
	}
	// An empty answer for the second whose events the last page served:
	// the relay answered before them, or left them out. No empty answer
	// of it is the end for sure. (With the page and the probes after it
	// answered so, a relay answering runs of REQs before their events,
	// then dropping them, was drained with 50 of its 3,000 events.)
	if n+stolen+newer == 0 && !ps.windowed && ps.servedBelow > 0 { // (newer only: it ignores until, see below)
		r.emptiedAt(s.Since, s.Cursor, ps.servedBelow)
	}
	ps.servedBelow = 0
	wall := false
	switch {
	case n == 0 && older == 0 && r.substantial(newer):
		// A page of events newer than until, at least half a page: the
		// relay ignores until, so newest-first paging cannot move. (A few
		// stray newer events on an otherwise empty page are just the end.)
		// Keep what came, say why.
		if _, err := r.commit(page.Items, malformed, nil); err != nil {
			return s, nil, err
		}
		r.fail(FinishUnpageable, fmt.Sprintf("asked until=%d, got %d newer events and none in range: the relay ignores until", s.Cursor, newer))
		return s, nil, nil
	case n == 0 && r.emptiesDoubted() && ps.empties < emptyRetries:
		ps.empties++ // its EOSE may have come before its events, or its answer was cut: ask again
	case ps.windowed && n+stolen == 0 && ps.empties < emptyRetries && r.heldUnder(asked, s):
		// A window answered empty where the archive holds the relay's
		// events: answered before its events (their late frames may
		// come after the crawl stopped listening), or the events left
		// out. Asked again before it is believed. (A window of the whole
		// range answered so, on a relay not yet caught sending events
		// late, ended its crawl with 2,949 of 3,000 lost.)
		ps.empties++
	case ps.windowed:
		cursor, wall = r.windowStep(&ps.win, s.Since, asked, s.Cursor, n+stolen, full)
		if cursor < asked {
			r.answered(cursor+1, s.Cursor, s.Cursor != s.Until, ats)
		}
	case n == 0:
		// A page with nothing in range is the end; a full one of stolen
		// events only says so by trusting the order.
		cursor, trusted = s.Since-1, full
		// Unless narrower windows show the relay cut its scan short.
		// Checked where pages of the shard found events (a scan that
		// stopped early stopped under them), where what the crawl saw so
		// far puts events (a page that ended before its events came, on
		// a relay not caught yet, left a shard planned around 1,300
		// events empty), or the relay was caught. A shard of a sparse
		// relay that is empty from its top costs the probes too.
		//
		// On a relay caught answering pages with nothing where it holds
		// events (emptiesDoubted), a window holding an event more likely
		// shows such an answer than a scan that ended early: the page is
		// asked for again (up to emptyRetries times more, emptyRetries
		// times over) before the windows are searched for the break. (A
		// search after each such answer moved the cursor a second at a
		// time, for minutes, on a relay answering every other REQ so.)
		doubted := r.emptiesDoubted()
		if s.Cursor != s.Until || expected >= 1 || r.caught(lieEmptyEarly) || doubted {
			again := doubted && ps.contradicted < emptyRetries
			if u, found := r.emptyProbe(ctx, s.Since, s.Cursor, !again); found && again {
				cursor, trusted, ps.empties = s.Cursor, false, 0
				ps.contradicted++
			} else if found {
				// (A relay answering runs of REQs with nothing, each
				// page so answered and searched under, moved the cursor
				// 7 seconds a page, for minutes.)
				cursor, ps.servedBelow = u, 1
			}
		}
		if stolen == 0 {
			r.answered(cursor+1, s.Cursor, s.Cursor != s.Until, nil)
		}
	case oldest < s.Cursor:
		// Next page repeats the oldest second (inclusive until): the
		// relay may have cut the page inside it. Ids dedup the overlap.
		// The page is trusted to be the range's newest events: checked
		// now and then, and paged again in windows if that was wrong.
		// A short page too: one that leaves events out as it sends them
		// cuts every page short of the most a page was seen to hold (a
		// relay dropping 1 event in 3 so lost 984 of 3,000, drained,
		// while only full pages were checked).
		cursor, trusted, ps.servedBelow = oldest, true, countAt(ats, oldest)
		top := r.orderCheckTop(s.Cursor, page)
		span := top - oldest
		due, first := r.orderCheckDue()
		due = due || ps.span == 0 || span > orderCheckSpan*ps.span
		ps.span = span
		if full {
			// The last full page not checked is checked when the shard
			// ends (a short one after it does not stand in for it).
			ps.unchecked = nil
		}
		if !due {
			if full {
				held := 0 // ats holds each in-range second once per distinct id
				for _, at := range ats {
					if at > oldest && at <= top {
						held++
					}
				}
				ps.unchecked = &uncheckedPage{oldest: oldest, top: top, held: held}
			}
		} else if first && r.substantial(n) && r.recheckPage(ctx, page, oldest, top) {
			// (A page under half a page, as a catch-up's, gets only the
			// probe: asked for again whole, it would double a short run's
			// REQs.)
			cursor, trusted = s.Cursor, false
		} else if lo, hi, ok := emptySeconds(ats, oldest, top); ok && r.checkOrder(ctx, emptyRun{lo: lo, hi: hi, oldest: oldest}) {
			// Probed after a whole page asked again too: a relay sorting
			// by id sends the same page again (its first page, taken for
			// the newest, ended its crawl 2,900 events short).
			cursor, trusted = s.Cursor, false
		}
	default:
		// Every event is at the cursor second. If the page was full, that
		// second may hold more than a page: a wall. A short page wholly
		// inside one second is one too if the relay's COUNT for it says
		// more than the page held (a relay may cut pages below any size
		// we learned).
		wall = r.secondFull(ctx, n, frames) || r.possibleWall(ctx, s.Cursor, n)
		cursor = s.Cursor - 1
	}
	if wall {
		if _, err := r.commit(page.Items, malformed, nil); err != nil {
			return s, nil, err
		}
		page.Items, malformed = nil, nil
		if err := r.completeWall(ctx, s.Cursor); err != nil {
			return s, nil, err
		}
	}
	next, c := r.commitAhead(page, malformed, s, shardAdvance{id: s.ID, cursor: cursor, from: s.Cursor, trusted: trusted, endTrusted: endTrusted})
	return next, c, nil
}

// countAt is how many of ats (one created_at per distinct event) are at.
func countAt(ats []int64, at int64) int {
	n := 0
	for _, a := range ats {
		if a == at {
			n++
		}
	}
	return n
}

// emptiedAt records the relay answering a page for [since, cursor] with
// nothing, though it had just served n events there (see
// pageState.servedBelow).
func (r *relayCrawl) emptiedAt(since, cursor int64, n int) {
	r.lie(lieEmptied, fmt.Sprintf("answered [%d, %d] with nothing though it had just served %d events there: "+
		"it answers before its events or leaves them out, so an empty page is not the end", since, cursor, n))
}

// heldUnder reports whether the archive holds events the relay served in
// [asked, s.Cursor], leaving out the cursor's second if a page moved the
// cursor there (that page's oldest events are in it). A range the archive
// cannot be read for counts as held.
func (r *relayCrawl) heldUnder(asked int64, s shard.Shard) bool {
	top := s.Cursor
	if top != s.Until {
		top--
	}
	if asked > top {
		return false
	}
	n, err := r.held(asked, top)
	return err != nil || n > 0
}

// full reports whether a page of n in-range events may have been cut by
// the relay's limit. Until the relay's effective page size is known, any
// page might have been.
func (r *relayCrawl) full(n, frames int) bool {
	if frames == 0 {
		// Nothing in range: no limit cut it. (Taken for full while the
		// page size was unknown, an empty window of a relay caught
		// sorting its pages otherwise was halved down to one second,
		// and each second then asked for as a wall: a run with nothing
		// new took 13,000 pages and ended with incomplete walls.)
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	eff := r.rec.EffectiveLimit
	// frames too: a relay whose duplicate frames count toward its clamp
	// cuts a page at fewer distinct events than it learned.
	return eff == 0 || n >= eff || frames >= eff || n >= r.limit || frames >= r.limit
}

// secondFull is full(n, frames) for a page whose events are all in one
// second: it may be a wall. If the page is under the limit, the relay's
// page size is learned first, once per run, from a page of the job's
// whole range: what a run learns from its own pages is the most one of
// them held, and a run that finds events one or two at a time (a
// catch-up over the last minutes) would take each for a wall, which a
// relay without COUNT cannot prove whole. The relay serves at least as
// many events a page as that page holds; one holding fewer than the limit
// in all may be cutting every page at that size, and is learned no more.
func (r *relayCrawl) secondFull(ctx context.Context, n, frames int) bool {
	if full := r.full(n, frames); !full || n >= r.limit {
		return full
	}
	r.sizeOnce.Do(func() {
		r.mu.Lock()
		since := r.job.meta.Since
		r.mu.Unlock()
		page, _, err := r.fetch(ctx, r.filter(since, shard.OpenTop, nil, nil))
		if err != nil {
			return
		}
		defer page.Release()
		if page.End != relayconn.EndEOSE {
			return
		}
		ids := make(map[[32]byte]struct{}, len(page.Items))
		for _, it := range page.Items {
			if it.CreatedAt >= since {
				ids[it.ID] = struct{}{}
			}
		}
		r.mu.Lock()
		r.rec.EffectiveLimit = max(r.rec.EffectiveLimit, min(len(ids), r.limit))
		r.mu.Unlock()
		r.log.Debug("learned the relay's page size", zap.Int("at_least", min(len(ids), r.limit)))
	})
	return r.full(n, frames)
}

// possibleWall reports whether a short page of n distinct events, all in
// second, may still have been cut: the relay's COUNT for the second says
// more, or (without an exact COUNT) the page is at least half a page.
func (r *relayCrawl) possibleWall(ctx context.Context, second int64, n int) bool {
	if !r.count {
		return r.substantial(n)
	}
	c, ok := r.countEvents(ctx, second, second)
	return ok && c.n > int64(n) || !(ok && c.proves()) && r.substantial(n)
}

// densityTop is the top of a page's span for the density estimate: an
// open shard's cursor is no second, so the page spans up to now (or its
// oldest event, if that is later).
func (r *relayCrawl) densityTop(cursor, oldest int64) int64 {
	if cursor != shard.OpenTop {
		return cursor
	}
	return max(r.c.opts.Now().Unix(), min(oldest, shard.OpenTop-1))
}

// substantial reports whether n events are at least half of what the
// relay puts in a page.
func (r *relayCrawl) substantial(n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	page := r.limit
	if eff := r.rec.EffectiveLimit; eff > 0 {
		page = min(page, eff)
	}
	return n > 0 && 2*n >= page
}

// filter renders a REQ filter for [since, until] with the job's kinds
// and authors, or the given ones (a wall's split narrows them).
// rangeFilter is the job's filter over [since, until] (until
// shard.OpenTop: no upper bound) with limit.
func (r *relayCrawl) rangeFilter(since, until int64, limit int) filterJSON {
	top := &until
	if until == shard.OpenTop {
		top = nil
	}
	return r.jobFilter(&since, top, limit)
}

func (r *relayCrawl) filter(since, until int64, kinds []int, authors []string) []byte {
	return r.filterJSON(since, until, kinds, authors).bytes()
}

func (r *relayCrawl) filterJSON(since, until int64, kinds []int, authors []string) filterJSON {
	f := r.rangeFilter(since, until, r.limit)
	if kinds != nil {
		f.Kinds = kinds
	}
	if authors != nil {
		f.Authors = authors
	}
	return f
}
