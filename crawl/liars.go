package crawl

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nostr-archiver/archiver/relayconn"
	"github.com/nostr-archiver/archiver/shard"
	"go.uber.org/zap"
)

// Paging by until trusts two things NIP-01 promises and real relays break:
// that a page is the range's newest events down to its oldest one, and that
// an empty page means the range holds nothing. A relay caught breaking
// either is recorded (RelayRecord.Lies), paged as safely as can be, and
// none of its ranges counts as proven by paging alone.
const (
	lieOverLimit  = "over-limit"
	lieEmptyEarly = "empty-early"
)

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
// skips nothing (if no store clamps below the limit asked).
func (r *relayCrawl) overLimitCursor(ats []int64, limit int) int64 {
	r.lie(lieOverLimit, fmt.Sprintf("sent more events than the limit asked (%d for %d): its stores each apply the limit, "+
		"as a khatru relay's QueryEvents do, so a page is not the range's newest events", len(ats), limit))
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
func (r *relayCrawl) emptyProbe(ctx context.Context, since, top int64) (int64, bool) {
	if top == shard.OpenTop {
		top = r.c.opts.Now().Unix()
	}
	shifts := emptyProbeShifts
	if r.caught(lieEmptyEarly) {
		shifts = emptyProbeShiftsCaught
	}
	d := top - since
	for _, shift := range shifts {
		u := top - max(1, d>>shift)
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
// limit-1 REQs), more for one caught answering empty pages early.
var (
	emptyProbeShifts       = []int{8, 4, 1}
	emptyProbeShiftsCaught = []int{20, 16, 12, 10, 8, 6, 4, 3, 2, 1}
)

// probeWindow asks for the newest event of [since, until] (limit 1): its
// created_at, nil if the relay sent none in the window, ok false if the
// probe failed (which shows nothing either way).
func (r *relayCrawl) probeWindow(ctx context.Context, since, until int64) (*int64, bool) {
	page, _, err := r.fetch(ctx, r.jobFilter(&since, &until, 1).bytes())
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
