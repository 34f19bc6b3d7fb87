package crawl

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/relayconn"
	"github.com/nostr-archiver/archiver/shard"
	"go.uber.org/zap"
)

// A job is one created_at range of one relay, split into shards. Its
// state lives in the raw store under keys derived from the range as the
// user gave it, so running the same command again resumes it: the job
// meta at key, each shard of generation g at key/g<g>/<shard id>.
type jobState struct {
	key  string
	meta jobMeta
}

type jobMeta struct {
	Since int64 `json:"since"`
	Until int64 `json:"until"` // resolved: "now" at the first run of an open job
	Open  bool  `json:"open"`  // until was "now": a finished job extends on the next run
	Gen   int   `json:"gen"`
	Done  bool  `json:"done"`
}

func (j *jobState) shardPrefix() string { return j.key + "/g" + strconv.Itoa(j.meta.Gen) + "/" }

// openOverlap is how far back an extension of an open job starts before
// the previous run's end, for events that arrived late with an older
// created_at.
const openOverlap = 600

// loadJob resumes the job of the crawl's options, or plans it. It returns
// the shard queue of its current generation.
func (r *relayCrawl) loadJob(ctx context.Context) (*jobState, []shard.Shard, error) {
	o := r.c.opts
	spec := "now"
	if o.Until != 0 {
		spec = strconv.FormatInt(o.Until, 10)
	}
	j := &jobState{key: fmt.Sprintf("job/%d/%s", o.Since, spec) + o.filterKey()}
	raw, err := o.Store.Shard(r.idx, j.key)
	if err != nil {
		return nil, nil, err
	}
	now := o.Now().Unix()
	if raw == nil {
		j.meta = jobMeta{Since: o.Since, Until: o.Until, Open: o.Until == 0}
		if j.meta.Open {
			j.meta.Until = max(now, o.Since)
		}
		shards, err := r.plan(ctx, j, j.meta.Since, j.meta.Until)
		return j, shards, err
	}
	if err := json.Unmarshal(raw, &j.meta); err != nil {
		return nil, nil, fmt.Errorf("job state %s of %s: %w", j.key, r.url, err)
	}
	if j.meta.Done && j.meta.Open && now > j.meta.Until {
		// Extend a finished open job to the new "now".
		from := max(j.meta.Since, j.meta.Until-openOverlap)
		j.meta.Until, j.meta.Done = now, false
		j.meta.Gen++
		shards, err := r.plan(ctx, j, from, now)
		return j, shards, err
	}
	states, err := o.Store.ShardsWithPrefix(r.idx, j.shardPrefix())
	if err != nil {
		return nil, nil, err
	}
	var shards []shard.Shard
	for id, raw := range states {
		var s shard.Shard
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, fmt.Errorf("shard %s of %s: %w", j.shardPrefix()+id, r.url, err)
		}
		shards = append(shards, s)
	}
	if len(shards) == 0 {
		return nil, nil, fmt.Errorf("job %s of %s has no shards", j.key, r.url)
	}
	return j, shards, nil
}

// plan splits [since, until] into shards and persists them with the job
// meta in one batch. Where the relay answers NIP-45 COUNT, the shards are
// sized by event count; otherwise by which time slices hold events at all
// (one limit-1 REQ each); the density learned from pages sizes the steals
// that rebalance it.
func (r *relayCrawl) plan(ctx context.Context, j *jobState, since, until int64) ([]shard.Shard, error) {
	start := time.Now()
	var est shard.Estimator = shard.Uniform{}
	r.rec.PlannedBy = "uniform"
	n := r.c.opts.Shards
	if total, ok := r.countDensity(ctx, since, until); r.count && ok {
		est, r.rec.PlannedBy = r.density, "count"
		// A shard per page's worth of events, up to Shards: a relay of
		// 20 events is one page, not Shards REQs, COUNTs and coverage
		// ranges (steals split a shard when connections sit idle).
		n = int(min(int64(n), max(1, (total+int64(r.limit)-1)/int64(r.limit))))
	} else if occ, ok := r.probeOccupancy(ctx, since, until); ok {
		est, r.rec.PlannedBy, r.occupied = occ, "probe", occ
		// What the probes proved empty is empty to the density too, which
		// sizes steals and the progress estimate: else it spreads what
		// pages find over decades of nothing.
		for _, g := range occ.gaps(since, until) {
			r.density.ObserveCount(g[0], g[1], 0)
		}
		r.log.Debug("probed", zap.Int("intervals", len(occ)), zap.Int64("occupied_seconds", occ.width()))
	}
	shards, err := shard.Plan(since, until, n, est)
	if err != nil {
		return nil, fmt.Errorf("plan %s of %s: %w", j.key, r.url, err)
	}
	if j.meta.Open {
		// "Now" is no bound: relays serve events dated ahead (clock skew,
		// or far future), and an archive holds those too.
		top := &shards[len(shards)-1]
		top.Until, top.Cursor = shard.OpenTop, shard.OpenTop
	}
	r.log.Debug("planned", zap.String("planned_by", r.rec.PlannedBy), zap.Int("shards", len(shards)), zap.Duration("took", time.Since(start)))
	states := map[string][]byte{j.key: j.encode()}
	for _, s := range shards {
		states[j.shardPrefix()+s.ID] = encodeShard(s)
	}
	if _, err := r.c.opts.Store.Ingest(&rawstore.Batch{Relay: r.idx, Shards: states}); err != nil {
		return nil, err
	}
	return shards, nil
}

// countSlices is how many time slices (COUNT requests or probes) size a plan.
const countSlices = 16

// countDensity asks the relay's NIP-45 COUNT for [since, until] and, if
// it holds more than a page, for equal time slices of it, and feeds the
// answers to the density estimate. It returns the total and whether every
// COUNT was answered exactly (a range counted empty is planned as one
// shard: a catch-up of a quiet relay pages it once, not once a slice).
func (r *relayCrawl) countDensity(ctx context.Context, since, until int64) (int64, bool) {
	if !r.count {
		return 0, false
	}
	// An approximate count may be far below what the relay holds (a
	// capped one is): "one page holds it all" would plan one shard over
	// the whole range, so the plan is made by probes instead.
	c, ok := r.countEvents(ctx, since, until)
	total := c.n
	if !ok || !c.proves() {
		return 0, false
	}
	if total <= int64(r.limit) {
		// One page holds it all: slices would only cost round trips.
		r.density.ObserveCount(since, until, total)
		return total, true
	}
	total = 0
	for _, sl := range timeSlices(since, until, countSlices) {
		c, ok := r.countEvents(ctx, sl[0], sl[1])
		if !ok || !c.proves() {
			return 0, false
		}
		r.density.ObserveCount(sl[0], sl[1], c.n)
		total += c.n
	}
	return total, total > 0
}

// timeSlices splits [since, until] into at most n equal slices (fewer if
// the range has fewer seconds), the last one taking what is left.
func timeSlices(since, until int64, n int) [][2]int64 {
	step := max(1, (until-since+int64(n))/int64(n)) // ceil(seconds / n)
	var out [][2]int64
	for lo := since; lo <= until; lo += step {
		hi := min(until, lo+step-1)
		if lo+step > until {
			hi = until
		}
		out = append(out, [2]int64{lo, hi})
		if hi == until {
			break
		}
	}
	return out
}

// probeOccupancy finds which parts of [since, until] hold events, with
// limit-1 REQs (see narrow): a job's range usually starts long before a
// relay's first event, and even shards would spend the first connections
// on empty time. It reports false if the first round of probes failed or
// found nothing.
func (r *relayCrawl) probeOccupancy(ctx context.Context, since, until int64) (occupancy, bool) {
	return narrow(since, until, func(parts [][2]int64) ([]int64, bool) { return r.probe(ctx, parts) })
}

// narrow finds the occupied parts of [since, until] with probe, which
// returns the created_at of the newest event in each slice it is given
// (math.MinInt64 for none), or false if it failed. The newest event of
// [lo, hi] proves (newest, hi] empty, so rounds of probes (probeInflight,
// one round trip) over what may hold events narrow it, until a round stops
// narrowing it by a quarter or probeRounds have run.
func narrow(since, until int64, probe func(parts [][2]int64) ([]int64, bool)) (occupancy, bool) {
	occ := occupancy{{since, until}}
	for round := range probeRounds {
		parts := occ.split(probeInflight)
		newest, ok := probe(parts)
		if !ok {
			return occ, round > 0
		}
		var next occupancy
		for i, sl := range parts {
			// A relay that ignores since or until may answer outside the
			// slice: keep only what the answer proves about the slice.
			if hi := min(sl[1], newest[i]); hi >= sl[0] {
				next = append(next, [2]int64{sl[0], hi})
			}
		}
		if len(next) == 0 {
			return occ, round > 0 // emptied since the last round: keep what it found
		}
		narrowed := 4*next.width() <= 3*occ.width()
		occ = next
		if !narrowed {
			break
		}
	}
	return occ, true
}

// probeRounds bounds the rounds of narrow: each costs a round trip.
const probeRounds = 6

// probeTarget is where the plan's probes go: probeConns connections with
// up to probeInflight/probeConns probes each (they are limit-1 REQs, and a
// round at the controller's start would take several round trips; relays
// serve few REQs of one connection at once), fewer if NIP-11's
// max_subscriptions or the user's caps say so.
func (r *relayCrawl) probeTarget() (int, int) {
	n := min(probeInflight/probeConns, r.c.opts.MaxInFlightPerConn)
	if doc := r.rec.NIP11; doc != nil && doc.MaxSubscriptions > 0 {
		n = min(n, max(1, doc.MaxSubscriptions-1))
	}
	return min(probeConns, r.c.opts.MaxConnsPerRelay), n
}

// A round of probes: probeInflight of them, on probeConns connections.
const probeInflight, probeConns = 8, 2

// probe sends a limit-1 REQ per slice, all in flight together, and returns
// the created_at of the newest event of each (math.MinInt64 for none); false
// if a probe failed.
func (r *relayCrawl) probe(ctx context.Context, parts [][2]int64) ([]int64, bool) {
	newest := make([]int64, len(parts))
	failed := make([]bool, len(parts))
	var wg sync.WaitGroup
	for i, sl := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			newest[i] = math.MinInt64
			pc, err := r.conns.acquireWithin(ctx, r.probeTarget)
			if err != nil {
				failed[i] = true
				return
			}
			page, err := pc.c.Req(ctx, r.jobFilter(&sl[0], &sl[1], 1).bytes(), 1, r.c.opts.PageTimeout)
			r.conns.release(pc)
			if failed[i] = err != nil || page.End != relayconn.EndEOSE; failed[i] {
				return
			}
			for _, it := range page.Items {
				newest[i] = max(newest[i], it.CreatedAt)
			}
		}()
	}
	wg.Wait()
	return newest, !slices.Contains(failed, true)
}

// occupancy estimates one event per second over the intervals a probe found
// events in, and none elsewhere.
type occupancy [][2]int64

func (o occupancy) Estimate(a, b int64) float64 {
	var n float64
	for _, sl := range o {
		if lo, hi := max(a, sl[0]), min(b, sl[1]); hi >= lo {
			n += float64(hi - lo + 1)
		}
	}
	return n
}

// width is the seconds o covers.
func (o occupancy) width() int64 {
	var w int64
	for _, sl := range o {
		w += sl[1] - sl[0] + 1
	}
	return w
}

// gaps returns the parts of [since, until] that o (sorted, within it)
// leaves out.
func (o occupancy) gaps(since, until int64) [][2]int64 {
	var out [][2]int64
	next := since
	for _, sl := range o {
		if sl[0] > next {
			out = append(out, [2]int64{next, sl[0] - 1})
		}
		next = sl[1] + 1
	}
	if next <= until {
		out = append(out, [2]int64{next, until})
	}
	return out
}

// split cuts o into at most n slices (n >= 2): each interval gets one plus
// a share of the rest proportional to its width, after the intervals with
// the narrowest gaps between them are merged down to n/2.
func (o occupancy) split(n int) [][2]int64 {
	o = slices.Clone(o)
	for len(o) > n/2 {
		j := 0 // merge o[j] and o[j+1], the pair with the narrowest gap
		for i := 1; i+1 < len(o); i++ {
			if o[i+1][0]-o[i][1] < o[j+1][0]-o[j][1] {
				j = i
			}
		}
		o[j][1] = o[j+1][1]
		o = slices.Delete(o, j+1, j+2)
	}
	w, rest := o.width(), int64(n-len(o))
	var out [][2]int64
	for _, sl := range o {
		k := 1 + int(rest*(sl[1]-sl[0]+1)/w)
		out = append(out, timeSlices(sl[0], sl[1], k)...)
	}
	return out
}

func (j *jobState) encode() []byte {
	b, _ := json.Marshal(&j.meta)
	return b
}

func encodeShard(s shard.Shard) []byte {
	b, _ := json.Marshal(s)
	return b
}
