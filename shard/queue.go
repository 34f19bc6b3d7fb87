package shard

import (
	"cmp"
	"fmt"
	"slices"
)

// Queue holds the shards of one job: it hands out pending shards, records
// cursor progress, and when nothing is pending splits the running shard with
// the most estimated work left so an idle worker can help. It is
// deterministic (same calls, same answers and IDs) and not safe for
// concurrent use.
//
// Workers must use the Shard that Advance returns for their next page: a
// steal raises the Since of the shard they are paging.
type Queue struct {
	est       Estimator
	minEvents float64
	shards    []entry // sorted by Since; done shards stay, so the set always covers the job
}

type entry struct {
	Shard
	running bool
}

// NewQueue builds a queue over shards, from Plan or reloaded from disk (any
// order; all start not running). They must be non-empty, gap-free and
// disjoint with unique IDs, Since >= 0 and cursors in [Since-1, Until]
// (ErrShards, ErrCursor). est sizes steals (nil means Uniform); a steal
// never splits a remainder estimated below minEvents.
func NewQueue(shards []Shard, est Estimator, minEvents float64) (*Queue, error) {
	if len(shards) == 0 {
		return nil, fmt.Errorf("%w: no shards", ErrShards)
	}
	if est == nil {
		est = Uniform{}
	}
	q := &Queue{est: est, minEvents: minEvents, shards: make([]entry, len(shards))}
	for i, s := range shards {
		q.shards[i] = entry{Shard: s}
	}
	slices.SortFunc(q.shards, func(a, b entry) int { return cmp.Compare(a.Since, b.Since) })
	ids := make(map[string]bool, len(shards))
	for i, e := range q.shards {
		switch {
		case e.Since < 0 || e.Since > e.Until:
			return nil, fmt.Errorf("%w: shard %s has range [%d, %d]", ErrShards, e.ID, e.Since, e.Until)
		case e.Cursor > e.Until || e.Cursor < e.Since-1:
			return nil, fmt.Errorf("%w: shard %s cursor %d outside [%d, %d]", ErrCursor, e.ID, e.Cursor, e.Since-1, e.Until)
		case ids[e.ID]:
			return nil, fmt.Errorf("%w: duplicate id %q", ErrShards, e.ID)
		case i > 0 && q.shards[i-1].Until+1 != e.Since:
			return nil, fmt.Errorf("%w: shards %s and %s leave a gap or overlap at %d", ErrShards, q.shards[i-1].ID, e.ID, e.Since)
		}
		ids[e.ID] = true
	}
	return q, nil
}

// Next hands out work to an idle worker and marks it running: the newest
// pending shard if any, else a shard split off the running shard with the
// most estimated work left. ok is false when nothing can be handed out (all
// done, or every running remainder is too small to split).
func (q *Queue) Next() (s Shard, ok bool) {
	for i := len(q.shards) - 1; i >= 0; i-- {
		if e := &q.shards[i]; !e.running && !e.Done() {
			e.running = true
			return e.Shard, true
		}
	}
	return q.steal()
}

// steal splits the running shard with the largest estimated remainder that
// can be split, keeping the invariant: keep replaces the victim in place and
// give, the older part, slots in just before it.
func (q *Queue) steal() (Shard, bool) {
	type candidate struct {
		i    int
		left float64
	}
	var cands []candidate
	for i, e := range q.shards {
		// An open shard whose first page has not landed has no known top
		// to split below: its estimate would reach the year 292 billion.
		if e.running && !e.Done() && e.Cursor != OpenTop {
			cands = append(cands, candidate{i, q.est.Estimate(e.Since, e.Cursor)})
		}
	}
	slices.SortStableFunc(cands, func(a, b candidate) int { return cmp.Compare(b.left, a.left) })
	for _, c := range cands {
		keep, give, ok := Split(q.shards[c.i].Shard, q.est, q.minEvents)
		if !ok {
			continue
		}
		q.shards[c.i].Shard = keep
		q.shards = slices.Insert(q.shards, c.i, entry{Shard: give, running: true})
		return give, true
	}
	return Shard{}, false
}

// Advance moves shard id's cursor down (see Shard.Advance) and returns the
// shard as it now stands; a done shard stops running.
func (q *Queue) Advance(id string, cursor int64) (Shard, error) {
	e, err := q.find(id)
	if err != nil {
		return Shard{}, err
	}
	s, err := e.Advance(cursor)
	if err != nil {
		return e.Shard, err
	}
	e.Shard = s
	if s.Done() {
		e.running = false
	}
	return s, nil
}

// Release returns a running shard to the pending set, e.g. after its
// connection dropped; it resumes from its cursor.
func (q *Queue) Release(id string) error {
	e, err := q.find(id)
	if err != nil {
		return err
	}
	e.running = false
	return nil
}

// Shards returns a copy of every shard, done ones included, oldest first:
// what the crawler persists and what stats report.
func (q *Queue) Shards() []Shard {
	out := make([]Shard, len(q.shards))
	for i, e := range q.shards {
		out[i] = e.Shard
	}
	return out
}

// Done reports whether every shard is done.
func (q *Queue) Done() bool {
	for _, e := range q.shards {
		if !e.Done() {
			return false
		}
	}
	return true
}

func (q *Queue) find(id string) (*entry, error) {
	for i := range q.shards {
		if q.shards[i].ID == id {
			return &q.shards[i], nil
		}
	}
	return nil, fmt.Errorf("%w: shard %q", ErrUnknown, id)
}
