package crawl

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/shard"
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
	j := &jobState{key: fmt.Sprintf("job/%d/%s", o.Since, spec)}
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
	var est shard.Estimator = shard.Uniform{}
	r.rec.PlannedBy = "uniform"
	if r.count && r.countDensity(ctx, since, until) {
		est, r.rec.PlannedBy = r.density, "count"
	} else if occ, ok := r.probeOccupancy(ctx, since, until); ok {
		est, r.rec.PlannedBy = occ, "probe"
	}
	shards, err := shard.Plan(since, until, r.c.opts.Shards, est)
	if err != nil {
		return nil, fmt.Errorf("plan %s of %s: %w", j.key, r.url, err)
	}
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

// countDensity asks the relay's NIP-45 COUNT for equal time slices of
// [since, until] and feeds the answers to the density estimate. It
// reports whether every slice was answered and something was counted.
func (r *relayCrawl) countDensity(ctx context.Context, since, until int64) bool {
	var total int64
	for _, sl := range timeSlices(since, until, countSlices) {
		pc, err := r.conns.acquire(ctx)
		if err != nil {
			return false
		}
		page, err := pc.c.Count(ctx, filterJSON{Kinds: r.c.opts.Kinds, Since: &sl[0], Until: &sl[1]}.bytes(), r.c.opts.PageTimeout)
		r.conns.release(pc)
		if err != nil || page.End != EndEOSE {
			return false
		}
		r.density.ObserveCount(sl[0], sl[1], page.Count)
		total += page.Count
	}
	return total > 0
}

// timeSlices splits [since, until] into n equal slices (fewer if the range
// has fewer seconds), the last one taking the remainder.
func timeSlices(since, until int64, n int) [][2]int64 {
	step := max(1, (until-since+1)/int64(n))
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

// probeOccupancy asks, with a limit-1 REQ per slice (countSlices equal
// slices of [since, until], in flight together), which slices hold any
// event: a job's range usually starts long before a relay's first event,
// and even shards would spend the first connections on empty time. It
// reports false if a probe failed or nothing was found.
func (r *relayCrawl) probeOccupancy(ctx context.Context, since, until int64) (occupancy, bool) {
	slices := timeSlices(since, until, countSlices)
	found := make([]bool, len(slices))
	failed := make([]bool, len(slices))
	var wg sync.WaitGroup
	for i, sl := range slices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pc, err := r.conns.acquire(ctx)
			if err != nil {
				failed[i] = true
				return
			}
			page, err := pc.c.Req(ctx, filterJSON{Kinds: r.c.opts.Kinds, Since: &sl[0], Until: &sl[1], Limit: 1}.bytes(), 1, r.c.opts.PageTimeout)
			r.conns.release(pc)
			failed[i] = err != nil || page.End != EndEOSE
			found[i] = !failed[i] && len(page.Items) > 0
		}()
	}
	wg.Wait()
	var occ occupancy
	for i, sl := range slices {
		if failed[i] {
			return nil, false
		}
		if found[i] {
			occ = append(occ, sl)
		}
	}
	return occ, len(occ) > 0
}

// occupancy estimates one event per second over the slices a probe found
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

func (j *jobState) encode() []byte {
	b, _ := json.Marshal(&j.meta)
	return b
}

func encodeShard(s shard.Shard) []byte {
	b, _ := json.Marshal(s)
	return b
}
