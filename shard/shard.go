// Package shard plans the created_at range of one relay's crawl job: it
// splits the range into disjoint shards of roughly equal event count, splits
// a running shard further when an idle worker wants work, and plans how to
// drain a "wall" (one second holding more events than a page).
//
// Everything here is pure: no I/O, no clock, no goroutines, and not safe for
// concurrent use (the crawler owns one Queue per job behind its own lock).
// The invariant it keeps (DESIGN.md, invariant 4): the shards of a job are
// disjoint and their union is the job's range, through every Plan, Split and
// cursor advance.
package shard

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Errors callers may branch on; each is wrapped with details.
var (
	// ErrRange: since > until, or the range has no second >= 0.
	ErrRange = errors.New("shard: invalid range")
	// ErrCount: a plan was asked for n <= 0 shards.
	ErrCount = errors.New("shard: invalid shard count")
	// ErrCursor: a cursor moved up (newer) or a shard's cursor is outside
	// [Since-1, Until].
	ErrCursor = errors.New("shard: invalid cursor")
	// ErrUnknown: no shard (or wall leaf) with that identity.
	ErrUnknown = errors.New("shard: unknown")
	// ErrReported: a wall leaf was reported twice.
	ErrReported = errors.New("shard: leaf already reported")
	// ErrShards: a set of shards handed to NewQueue is not a disjoint,
	// gap-free cover of one range with unique IDs.
	ErrShards = errors.New("shard: invalid shard set")
)

// Shard is the closed interval [Since, Until] of created_at seconds (both
// inclusive, as in NIP-01 filters) plus paging progress.
//
// Persist every field together: Splits names the next shard split off
// this one, so reloading a shard without it could reuse an ID.
type Shard struct {
	// ID is stable and unique within a plan: "0".."n-1" from Plan, then
	// "<parent>.<k>" for the k-th shard split off a parent (k from 1).
	ID    string
	Since int64
	Until int64
	// Cursor is the `until` of the next page: it starts at Until and moves
	// down; the seconds (Cursor, Until] are done. The shard is done when
	// Cursor < Since.
	Cursor int64
	// Splits counts the shards split off this one so far.
	Splits int
}

// OpenTop is the Until (and first Cursor) of an open job's newest shard: no
// upper bound, so its first REQ carries no `until` and events dated in the
// future (clock skew, or far future) are archived too. Its cursor drops to
// a real second with the first page that has events.
const OpenTop int64 = math.MaxInt64

// Open reports whether s has no upper bound.
func (s Shard) Open() bool { return s.Until == OpenTop }

// Done reports whether every second of the shard has been paged.
func (s Shard) Done() bool { return s.Cursor < s.Since }

// Advance returns s with its cursor moved down to cursor, the `until` of the
// next page (the oldest created_at of the last page, inclusive, or one less
// once that second is known to be complete). A cursor below Since marks the
// shard done; a cursor above the current one is a crawler bug (ErrCursor).
func (s Shard) Advance(cursor int64) (Shard, error) {
	if cursor > s.Cursor {
		return s, fmt.Errorf("%w: shard %s cursor %d moved up to %d", ErrCursor, s.ID, s.Cursor, cursor)
	}
	if cursor < s.Since {
		cursor = s.Since - 1
	}
	s.Cursor = cursor
	return s, nil
}

// Plan splits the job range [since, until] into at most n shards of roughly
// equal estimated event count (est == nil means Uniform). since is clamped to
// 0: relays disagree on negative bounds, so no shard ever asks for one.
//
// Fewer than n shards come back when the range has fewer than n seconds or
// when the estimate piles so much into one second that cuts would coincide.
// Shards are returned oldest first with IDs "0".."len-1", each with its
// cursor at Until.
func Plan(since, until int64, n int, est Estimator) ([]Shard, error) {
	if since > until {
		return nil, fmt.Errorf("%w: since %d > until %d", ErrRange, since, until)
	}
	if until < 0 {
		return nil, fmt.Errorf("%w: until %d < 0", ErrRange, until)
	}
	if n <= 0 {
		return nil, fmt.Errorf("%w: %d", ErrCount, n)
	}
	since = max(since, 0)
	if seconds := uint64(until-since) + 1; seconds < uint64(n) {
		n = int(seconds)
	}
	if est == nil {
		est = Uniform{}
	}
	total := est.Estimate(since, until)
	var starts []int64 // first second of each shard
	starts = append(starts, since)
	for k := 1; k < n; k++ {
		target := total * float64(k) / float64(n)
		prev := starts[len(starts)-1]
		if prev == until {
			break
		}
		if before(est, since, prev) >= target {
			continue // the second before prev already holds this share
		}
		t, found := firstReaching(est, since, prev+1, until, target)
		if !found {
			break
		}
		starts = append(starts, t)
	}
	shards := make([]Shard, len(starts))
	for i, lo := range starts {
		hi := until
		if i+1 < len(starts) {
			hi = starts[i+1] - 1
		}
		shards[i] = Shard{ID: strconv.Itoa(i), Since: lo, Until: hi, Cursor: hi}
	}
	return shards, nil
}

// Split divides what is left of s, [Since, Cursor], at its estimated median
// event count (est == nil means Uniform). keep is s with Since raised: the
// worker paging s from the top keeps it (same ID, same cursor). give is the
// new, older part [s.Since, keep.Since-1] with a fresh ID. ok is false, and s
// comes back unchanged, when the remainder is a single second or is
// estimated to hold fewer than minEvents events.
//
// A page already in flight on s may still return events below keep.Since:
// they are duplicates of give's work, harmless to store, and advancing keep
// past its Since just marks it done.
func Split(s Shard, est Estimator, minEvents float64) (keep, give Shard, ok bool) {
	// An open shard whose first page has not landed has no known top to
	// split below.
	if s.Done() || s.Cursor <= s.Since || s.Cursor == OpenTop {
		return s, Shard{}, false
	}
	if est == nil {
		est = Uniform{}
	}
	total := est.Estimate(s.Since, s.Cursor)
	if total < minEvents {
		return s, Shard{}, false
	}
	m, found := firstReaching(est, s.Since, s.Since+1, s.Cursor, total/2)
	if !found {
		m = s.Cursor // the top second alone holds more than half
	}
	keep = s
	keep.Since = m
	keep.Splits++
	give = Shard{
		ID:     s.ID + "." + strconv.Itoa(keep.Splits),
		Since:  s.Since,
		Until:  m - 1,
		Cursor: m - 1,
	}
	return keep, give, true
}

// before is the estimated count in [since, t-1]: the events older than t.
func before(est Estimator, since, t int64) float64 {
	if t <= since {
		return 0
	}
	return est.Estimate(since, t-1)
}

// firstReaching returns the smallest t in [lo, hi] whose events older than t
// (counted from since) reach target; found is false if none does. It
// bisects, so the float noise of a not quite monotone estimate can move the
// answer but never out of [lo, hi].
func firstReaching(est Estimator, since, lo, hi int64, target float64) (t int64, found bool) {
	if before(est, since, hi) < target {
		return 0, false
	}
	for lo < hi {
		mid := lo + int64((uint64(hi)-uint64(lo))/2)
		if before(est, since, mid) >= target {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, true
}
