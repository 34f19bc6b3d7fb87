package rawstore

import "sync/atomic"

// recentCommits lets Ingest look ids up before it takes ingestMu: a lookup
// sees every commit up to the generation it read first, and the ids that
// commits after it stored (the only ones it can have missed) are found
// here under the lock. A lookup older than the ring is redone under the
// lock. Everything but gen is guarded by ingestMu.
type recentCommits struct {
	gen  atomic.Uint64 // commits applied and visible to new iterators
	ring [recentDepth]map[[32]byte]struct{}
}

// recentDepth is how many commits a lookup may fall behind before it is
// redone: far more than commit concurrently (one per relay's page).
const recentDepth = 64

// since returns the ids stored by commits after gen, and false if some of
// those commits have left the ring.
func (r *recentCommits) since(gen uint64) ([]map[[32]byte]struct{}, bool) {
	cur := r.gen.Load()
	if cur-gen > recentDepth {
		return nil, false
	}
	var out []map[[32]byte]struct{}
	for g := gen + 1; g <= cur; g++ {
		out = append(out, r.ring[g%recentDepth])
	}
	return out, true
}

// add records a commit that is now visible, with the ids it stored. The
// ring's maps are reused, cleared: a new map per commit, with a table
// for a page of ids, was one of four such allocations per batch (0.19
// CPU-s of a 1M crawl together). Nobody keeps one past ingestMu.
func (r *recentCommits) add(ids map[[32]byte]*Copy) {
	g := r.gen.Load() + 1
	m := r.ring[g%recentDepth]
	if m == nil {
		m = make(map[[32]byte]struct{}, len(ids))
		r.ring[g%recentDepth] = m
	}
	clear(m)
	for id := range ids {
		m[id] = struct{}{}
	}
	r.gen.Store(g)
}
