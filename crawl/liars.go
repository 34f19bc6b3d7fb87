package crawl

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nostr-archiver/archiver/relayconn"
	"github.com/nostr-archiver/archiver/shard"
	"go.uber.org/zap"
)

// Paging by until trusts two things NIP-01 promises and real relays break:
// that a page is the range's newest events down to its oldest one (not its
// oldest, nor its lowest ids, nor each store's newest), and that an empty
// page means the range holds nothing. A relay caught breaking
// either is recorded (RelayRecord.Lies), paged as safely as can be, and
// none of its ranges counts as proven by paging alone.
const (
	lieOverLimit  = "over-limit"
	lieEmptyEarly = "empty-early"
	lieUnordered  = "unordered"
	lieAfterEOSE  = "after-eose"
	lieEmptied    = "emptied"
)

// emptiesDoubted reports whether the relay was caught answering a page
// with nothing where it holds events (its events after the EOSE, or never):
// an empty page of it is asked for again before it is believed.
func (r *relayCrawl) emptiesDoubted() bool {
	return r.caught(lieAfterEOSE) || r.caught(lieEmptied)
}

// lie records a way the relay was caught lying (the first text per kind).
func (r *relayCrawl) lie(kind, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.rec.Lies[kind]; ok {
		return
	}
	if r.rec.Lies == nil {
		r.rec.Lies = map[string]string{}
	}
	r.rec.Lies[kind] = text
	r.log.Warn("the relay's pages are not what NIP-01 promises; paging proves none of its ranges", zap.String("kind", kind), zap.String("how", text))
}

// caught reports whether the relay was caught lying in this way.
func (r *relayCrawl) caught(kind string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.rec.Lies[kind]
	return ok
}

// lies is the relay's recorded lies in one line ("" for none).
func (r *relayCrawl) lies() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, k := range slices.Sorted(maps.Keys(r.rec.Lies)) {
		out = append(out, r.rec.Lies[k])
	}
	return strings.Join(out, "; ")
}

// overLimitCursor is the cursor after a page that held n > limit distinct
// in-range events (ats, their created_at): a relay whose stores each
// apply the limit (khatru runs every QueryEvents function and sends what
// each yields) sends each store's newest limit, so the page's oldest
// event may be older than events a store cut off. Every store that was
// cut sent limit events, all at or after its cut, so the limit-th newest
// second of the page is at or after every cut: paging on from there
// skips nothing (if no store clamps below the limit asked). A page that
// reaches the time it was asked for (live) is no sign of such stores: an
// honest busy relay was caught so, by the events it took in meanwhile.
func (r *relayCrawl) overLimitCursor(ats []int64, limit int, live bool) int64 {
	if !live {
		r.lie(lieOverLimit, fmt.Sprintf("sent more events than the limit asked (%d for %d): its stores each apply the limit, "+
			"as a khatru relay's QueryEvents do, so a page is not the range's newest events", len(ats), limit))
	}
	ats = slices.Clone(ats)
	slices.Sort(ats)
	return ats[len(ats)-limit]
}

// emptyProbe checks an empty page for [since, top] with limit-1 REQs for
// narrower windows [since, u]: a relay whose scan ends early (the
// eventstore badger backend returns from a scan at an index entry whose
// event is gone, and khatru then sends EOSE) says a range is empty while
// it serves older events to a window that starts below the break. The
// break is usually just under top (the last page ended at it), so the
// windows end a little, then more, under top. Once one holds an event,
// the highest such window top is searched for (a window ending at or
// above the break is empty, one below it is not): paging goes on from
// there, and only the break's own second may hold events no window shows.
// With search false it reports the first window holding an event (top,
// true) and neither searches nor takes the relay for one whose scans end
// early: a relay caught sending events after their page's EOSE answers
// so whenever its page's events had not gone out yet, and the page is
// better asked for again.
func (r *relayCrawl) emptyProbe(ctx context.Context, since, top int64, search bool) (int64, bool) {
	if top == shard.OpenTop {
		top = r.c.opts.Now().Unix()
	}
	shifts := emptyProbeShifts
	if r.caught(lieEmptyEarly) || r.caught(lieEmptied) {
		shifts = emptyProbeShiftsCaught
	}
	d := top - since
	var below []int64 // how far under top each window ends, nearest first
	for _, a := range emptyProbeNear {
		if a < d>>shifts[0] {
			below = append(below, a)
		}
	}
	for _, shift := range shifts {
		below = append(below, max(1, d>>shift))
	}
	for _, b := range below[:len(shifts)] { // as many probes either way
		u := top - b
		if d < 2 || u < since {
			break
		}
		at, ok := r.probeWindow(ctx, since, u)
		if ctx.Err() != nil {
			return 0, false
		}
		if !ok || at == nil {
			continue
		}
		if !search {
			return top, true
		}
		r.lie(lieEmptyEarly, fmt.Sprintf("answered an empty page for [%d, %d] and then served an event at %d to [%d, %d]: "+
			"its scans end early (as the badger store's does at an index entry whose event is gone), so an empty page is not the end",
			since, top, *at, since, u))
		lo, hi := u, top // [since, lo] holds an event; [since, hi] came back empty
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			at, ok := r.probeWindow(ctx, since, mid)
			if !ok {
				break
			}
			if at != nil {
				lo = mid
			} else {
				hi = mid
			}
		}
		return lo, true
	}
	return 0, false
}

// The windows emptyProbe asks end d>>shift under top, d the empty range's
// width: three for a relay not caught yet (a shard's end costs three
// limit-1 REQs), more for one caught answering empty pages early. In a
// wide range (a shard planned over decades, as one by a COUNT that says a
// page holds everything) those all end far below where the events are:
// there the first windows end an hour and a day under top instead, and
// the widest shifts are left out.
var (
	emptyProbeShifts       = []int{8, 4, 1}
	emptyProbeShiftsCaught = []int{20, 16, 12, 10, 8, 6, 4, 3, 2, 1}
	emptyProbeNear         = []int64{3600, 86400}
)

// probeWindow asks for the newest events of [since, until]: the
// created_at of one, nil if the relay sent none in the window, ok false
// if the probe failed (which shows nothing either way).
func (r *relayCrawl) probeWindow(ctx context.Context, since, until int64) (*int64, bool) {
	page, _, err := r.fetch(ctx, r.jobFilter(&since, &until, probeLimit).bytes())
	if err != nil || page.End != relayconn.EndEOSE {
		return nil, false
	}
	for _, it := range page.Items {
		if it.CreatedAt >= since && it.CreatedAt <= until {
			return &it.CreatedAt, true
		}
	}
	return nil, true
}

// probeLimit is how many events a probe asks for, where one would show
// what it looks for: a relay that sends events outside a filter within
// its limit answered limit-1 probes with those alone, each order check
// passed, and a relay that showed each page one store of four lost 2,218
// of 3,000, drained.
const probeLimit = 8

// Order checks: a relay whose pages are not a range's newest events (it
// sorts them ascending, or by id, and stops at the limit) shows it by
// serving an event to seconds a page left empty above its oldest
// event (see emptyRun). The first pages of a run are checked, then
// one in orderCheckEvery, a worker's first on its shard, any that spans
// orderCheckSpan times more seconds than the worker's last (a page that
// leaves events out reaches further down), and a shard's last page
// when the shard ends, asked for again whole (checkLastPage: a relay whose
// order breaks with less than that left serves the rest in one page that
// spans too little, and may leave out only a few events):
// once a relay is caught, every range paged by trusting its order is paged
// again in windows, so a late catch costs pages, not events.
const (
	orderCheckFirst = 8
	orderCheckEvery = 16
	orderCheckSpan  = 4
)

// orderCheckDue reports whether the next page gets an order check, and
// whether it is one of the run's first (checked whole: recheckPage).
func (r *relayCrawl) orderCheckDue() (due, first bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pagesByUntil++
	first = r.pagesByUntil <= orderCheckFirst
	return first || r.pagesByUntil%orderCheckEvery == 0, first
}

// recheckPage asks again for the seconds (oldest, top] of a page that
// held ats there (created_ats, one per distinct id): a relay that
// sends a range's newest events sends no other event there; one that
// leaves events out as it sends (different ones each time) sends one it
// left out. It reports whether the relay was caught; what comes is
// stored. One probe of the widest empty run finds such a relay only
// where a left-out event falls (sweeps of the test relay's lies: 75-185
// of 3,000 lost, drained); asked for whole, the run's first pages each
// show it.
func (r *relayCrawl) recheckPage(ctx context.Context, page *relayconn.Page, oldest, top int64) bool {
	since, until := oldest+1, top
	again, ok := r.askAgain(ctx, since, until)
	if !ok {
		return false
	}
	for _, it := range page.Items {
		delete(again, it.ID)
	}
	for _, at := range again {
		r.catchUnordered(fmt.Sprintf("served an event at %d to [%d, %d] that a page asked for the range's newest events left out: "+
			"its pages are not a range's newest events (it sorts them otherwise, or leaves some out)", at, since, until))
		return true
	}
	return false
}

// liveMargin is how long before a page was asked for an event may be
// dated and still reach the relay after it (an open range's order check
// looks no later, so that events published meanwhile are no false alarm).
const liveMargin = time.Minute

// orderCheckTop is the top of the order check after a page asked up to
// cursor: the cursor, or if the page could get events published while it
// was asked for (its cursor is open, or late enough: events are dated a
// little ahead of the clock too), the time the page was asked for, less
// liveMargin.
func (r *relayCrawl) orderCheckTop(cursor int64, page *relayconn.Page) int64 {
	return min(cursor, r.c.opts.Now().Add(-page.Latency-liveMargin).Unix())
}

// reachesLive reports whether a page asked up to cursor could get events
// the relay took in while it was asked for (see orderCheckTop): the relay
// sends those to the subscription as they come, before its EOSE too, so
// more events than its limit are no sign of stores that each apply it.
func (r *relayCrawl) reachesLive(cursor int64, page *relayconn.Page) bool {
	return cursor > r.orderCheckTop(cursor, page)
}

// checkOrder asks for an event in run, seconds a page left empty
// above its oldest event: a relay that sends a range's newest events has
// none there. It reports whether the relay was caught. (An event the relay
// took in since the page was sent looks the same: the cost of that false
// alarm is paging in windows, never a lost event.)
func (r *relayCrawl) checkOrder(ctx context.Context, run emptyRun) bool {
	at, ok := r.probeWindow(ctx, run.lo, run.hi)
	if !ok || at == nil {
		return false
	}
	r.catchUnordered(fmt.Sprintf("served an event at %d to [%d, %d], seconds a page left empty above its oldest event at %d: "+
		"its pages are not a range's newest events (it sorts them otherwise, or leaves some out)", *at, run.lo, run.hi, run.oldest))
	return true
}

// emptyRun is a run [lo, hi] of seconds that a page whose oldest
// event is at oldest left empty: a relay that pages newest-first sent
// every event above the page's oldest second, so the run is empty on the
// relay too. A relay that sorts otherwise (by id, ascending) and stops at
// the limit leaves events out all over the range it was asked for; the
// page's widest empty run is the likeliest to hold one.
type emptyRun struct{ lo, hi, oldest int64 }

// emptySeconds returns the widest run of seconds in (oldest, top] that
// holds none of a page's events (ats, its in-range created_ats). The
// run above the page's newest event is one, but not the only one: a page
// that holds an event at its top second has none there. ok is false when
// the page leaves no second of (oldest, top] empty.
func emptySeconds(ats []int64, oldest, top int64) (lo, hi int64, ok bool) {
	secs := make([]int64, 0, len(ats)+1)
	secs = append(secs, oldest)
	for _, at := range ats {
		if at > oldest && at <= top {
			secs = append(secs, at)
		}
	}
	slices.Sort(secs)
	secs = append(slices.Compact(secs), top+1)
	for i := 1; i < len(secs); i++ {
		if a, b := secs[i-1]+1, secs[i]-1; a <= b && (!ok || b-a > hi-lo) {
			lo, hi, ok = a, b, true
		}
	}
	return lo, hi, ok
}

// catchUnordered records the lie and marks every range paged so far for
// paging again in windows: each of them was paged by trusting the order
// (trusted commits still in flight add theirs as they land; see commit).
func (r *relayCrawl) catchUnordered(text string) {
	r.lie(lieUnordered, text)
	r.repageAllPaged()
}

// catchAfterEOSE records that the relay sends events after their page's
// EOSE and, the first time, marks every range paged so far for paging
// again: an empty page may have ended a shard there, and an order check
// passed on an empty answer (from now on an empty page is asked for again
// first, see pageState.empties, and pages wait for their events, see
// lingerFor).
func (r *relayCrawl) catchAfterEOSE() {
	if r.caught(lieAfterEOSE) {
		return
	}
	r.lie(lieAfterEOSE, "sent events after the EOSE of their page (a page can end before its events)")
	r.repageAllPaged()
	// The order checks so far may have been answered before their
	// events: the next pages are checked as a run's first are.
	r.mu.Lock()
	r.pagesByUntil = 0
	r.mu.Unlock()
}

// lingerMin is how long a page of a relay caught sending events after
// their page's EOSE first waits for them (relayconn.Conn.SetLinger),
// doubled each time events still come late, up to Options.LateLinger.
// The relay's other pages go on meanwhile; a page whose events come later
// still is caught by lateInAnswers.
const lingerMin = 20 * time.Millisecond

// lingerFor is how long a page waits for late events: 0 for a relay not
// caught sending them.
func (r *relayCrawl) lingerFor() time.Duration {
	if !r.caught(lieAfterEOSE) || r.c.opts.LateLinger < 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return min(max(r.linger, lingerMin), r.c.opts.LateLinger)
}

// lingerLonger doubles the linger of a relay whose events came late
// although pages already waited for them.
func (r *relayCrawl) lingerLonger() {
	if !r.caught(lieAfterEOSE) || r.c.opts.LateLinger < 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if next := min(2*max(r.linger, lingerMin), r.c.opts.LateLinger); next > r.linger {
		r.linger = next
		r.log.Info("events still come after their page's EOSE: pages wait longer for them", zap.Duration("linger", next))
	}
}

// repageAllPaged marks every range paged so far for repageUntrusted.
func (r *relayCrawl) repageAllPaged() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.queue == nil {
		return // caught before the job was planned: nothing paged yet
	}
	for _, s := range r.queue.Shards() {
		if s.Cursor < s.Until {
			r.rec.Repage = addSpan(r.rec.Repage, Span{Since: s.Cursor + 1, Until: s.Until})
		}
	}
}

// Span is a created_at range [Since, Until] (Until shard.OpenTop: no upper
// bound).
type Span struct {
	Since int64 `json:"since"`
	Until int64 `json:"until"`
	// Seen counts the events the answers for the span showed in it
	// (RelayRecord.Unconfirmed only).
	Seen int64 `json:"seen,omitempty"`
}

// addSpan adds sp to spans (sorted, disjoint, not touching) and keeps them
// so, joining what overlaps or touches.
func addSpan(spans []Span, sp Span) []Span {
	out := make([]Span, 0, len(spans)+1)
	for _, x := range spans {
		switch {
		case x.Until < sp.Since-1 || sp.Until < x.Since-1:
			out = append(out, x)
		default:
			sp = Span{Since: min(sp.Since, x.Since), Until: max(sp.Until, x.Until), Seen: sp.Seen + x.Seen}
		}
	}
	out = append(out, sp)
	slices.SortFunc(out, func(a, b Span) int { return cmp.Compare(a.Since, b.Since) })
	return out
}

// pageWindow is the width of the next page's range for a relay caught
// serving pages that are not a range's newest events: paging by until
// from a page's oldest event would skip what the page left out above it,
// so each page asks for a window under the cursor, and only a short page
// (the whole window, whatever the order) moves the cursor past it. A full
// page halves the window; a short one doubles the next.
type pageWindow struct{ width int64 }

// bottom is the since of the next window under top, in a range from since.
func (w *pageWindow) bottom(since, top int64) int64 {
	if w.width <= 0 || w.width > top-since+1 {
		w.width = top - since + 1
	}
	return max(since, top-w.width+1)
}

// widen follows a short page for [bottom, top].
func (w *pageWindow) widen(bottom, top int64) { w.width = min(2*(top-bottom+1), 1<<40) }

// narrow follows a full page for [bottom, top]; false if the window is one
// second and cannot narrow.
func (w *pageWindow) narrow(bottom, top int64) bool {
	if bottom >= top {
		return false
	}
	w.width = (top - bottom + 1) / 2
	return true
}

// windowTop is the top second of the next window under cursor in a range
// from since: the cursor, or now for an open range not yet paged (the
// window still has no until, so that it holds what is dated later).
func (r *relayCrawl) windowTop(since, cursor int64) int64 {
	if cursor == shard.OpenTop {
		return max(since, r.c.opts.Now().Unix())
	}
	return cursor
}

// windowStep is the cursor after a page of n distinct events (full: see
// full) for the window [bottom, cursor] of a range from since, and
// whether the cursor's second must be completed as a wall first (one
// second fuller than a page).
//
// Only a page under half a page moves the cursor past its window: a
// relay caught serving pages that are not a range's newest events may
// be leaving events out of every page (one that drops some as it sends
// them cuts pages at the limit that hold fewer than the most a page was
// seen to hold: each looked short, whole windows of 1,500 events were
// taken as served by 87, and 2,800 of 3,000 were lost).
func (r *relayCrawl) windowStep(w *pageWindow, since, bottom, cursor int64, n int, full bool) (next int64, wall bool) {
	full = full || r.substantial(n)
	top := r.windowTop(since, cursor)
	switch {
	case !full:
		w.widen(bottom, top)
		return bottom - 1, false
	case w.narrow(bottom, top):
		return cursor, false
	case cursor != shard.OpenTop:
		return cursor - 1, true
	default:
		// More than a page dated now or later: no window narrows an open
		// top. Stored; only COUNT can prove the range now.
		r.log.Warn("more events dated from now on than a page holds, and the relay's pages are not its newest: "+
			"some may not be fetched", zap.Int64("from", bottom))
		return bottom - 1, false
	}
}

// repageLate is repageUntrusted, then the late events the connections
// still hold are stored (they count for the audit) and, if they caught
// the relay sending events after EOSE, what that marked is paged too, as
// is each range whose answers late events there proved partial
// (lateInAnswers), as long as the rounds store new events and up to
// maxLateRounds rounds that do not.
func (r *relayCrawl) repageLate(ctx context.Context) error {
	fresh := r.fresh.Load()
	for {
		if err := r.repageUntrusted(ctx); err != nil {
			return err
		}
		r.storeLate(r.conns.takeLate())
		if r.repagePending() {
			continue
		}
		if now := r.fresh.Load(); now > fresh {
			fresh = now
		} else {
			r.lateRounds++
		}
		if r.lateRounds > maxLateRounds || !r.lateInAnswers() {
			return nil
		}
	}
}

// maxLateRounds bounds how often a relay's crawl pages again, storing
// nothing new, the ranges whose answers late events proved partial: each
// round's pages may be answered before their events again. (Rounds that
// store new events go on: a relay answering runs of 7 REQs so left 54 of
// 3,000 after 4 rounds, each of which had found more.) What is left is
// recorded to page again (RelayRecord.Repage; the relay's ranges are
// unproven).
const maxLateRounds = 4

// answered records, for a relay caught sending events after their page's
// EOSE, that the crawl moved past [since, top] on an answer that showed
// the events of ats there (one created_at per distinct event; none for an
// empty answer): the rest of the answer may come after the move (a
// window whose page came partly within the linger and partly after it
// looked short, and was moved past with 10 of 3,000 lost). A top a page
// moved the cursor to (moved) is left out: that page's oldest events are
// there. Recorded before the move commits, which persists it.
func (r *relayCrawl) answered(since, top int64, moved bool, ats []int64) {
	if moved {
		top--
	}
	if since > top || !r.caught(lieAfterEOSE) {
		return
	}
	var seen int64
	for _, at := range ats {
		if at >= since && at <= top {
			seen++
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rec.Unconfirmed = addSpan(r.rec.Unconfirmed, Span{Since: since, Until: top, Seen: seen})
}

// lateInAnswers moves each range moved past on an answer (answered) where
// the archive now holds more events of the relay than the answers showed
// to the ranges to page again, and reports whether it moved any. Events
// there came late, for a page the crawl had taken for whole: what that
// page was asked for was not paged. (A range the archive cannot be read
// for is paged again too.) The others are kept: their events may come
// later still.
func (r *relayCrawl) lateInAnswers() bool {
	r.mu.Lock()
	spans := r.rec.Unconfirmed
	r.mu.Unlock()
	var held []Span
	for _, sp := range spans {
		if n, err := r.held(sp.Since, sp.Until); err != nil || n > sp.Seen {
			held = append(held, sp)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sp := range held {
		r.log.Info("events came late for a range paged as whole: paging it again",
			zap.Int64("since", sp.Since), zap.Int64("until", sp.Until), zap.Int64("seen", sp.Seen))
		r.rec.Repage = addSpan(r.rec.Repage, Span{Since: sp.Since, Until: sp.Until})
	}
	// Every worker has stopped: only this goroutine's repage adds to it.
	r.rec.Unconfirmed = slices.DeleteFunc(r.rec.Unconfirmed, func(x Span) bool { return slices.Contains(held, x) })
	return len(held) > 0
}

// repagePending reports whether ranges wait to be paged again.
func (r *relayCrawl) repagePending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.rec.Repage) > 0
}

// repageUntrusted pages again (in windows, for a relay caught not keeping
// the order) each range paged by trusting what the relay was since caught
// breaking, and strikes it from the record once paged.
func (r *relayCrawl) repageUntrusted(ctx context.Context) error {
	for {
		r.mu.Lock()
		if len(r.rec.Repage) == 0 {
			r.mu.Unlock()
			return nil
		}
		sp := r.rec.Repage[0]
		r.mu.Unlock()
		r.log.Info("paging again what was paged before the relay was caught", zap.String("lies", r.lies()),
			zap.Int64("since", sp.Since), zap.Int64("until", sp.Until))
		if _, err := r.repage(ctx, sp.Since, sp.Until); err != nil {
			return fmt.Errorf("paging [%d, %d] again in windows: %w", sp.Since, sp.Until, err)
		}
		r.mu.Lock()
		r.rec.Repage = slices.DeleteFunc(r.rec.Repage, func(x Span) bool { return x == sp })
		r.mu.Unlock()
		if _, err := r.commit(nil, nil, nil); err != nil {
			return fmt.Errorf("store: %w", err)
		}
	}
}
