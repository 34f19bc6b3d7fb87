package shard

import (
	"slices"
	"sort"
)

// Estimator estimates how many events a relay holds with created_at in
// [a, b] (both inclusive). It returns 0 when a > b and never a negative
// number. Only ratios matter to Plan; Split also compares the estimate with
// a minimum count.
type Estimator interface {
	Estimate(a, b int64) float64
}

// Uniform is the estimator with no information: one event per second.
type Uniform struct{}

// Estimate returns the number of seconds in [a, b].
func (Uniform) Estimate(a, b int64) float64 {
	if a > b {
		return 0
	}
	return float64(uint64(b)-uint64(a)) + 1
}

// maxSegments bounds the observations a Density keeps per source; past it,
// neighbours are merged pairwise (halving resolution, never losing counts).
const maxSegments = 4096

// Density learns a relay's event density over created_at from what the
// crawler sees: pages ("k events between x and y") and NIP-45 COUNT answers
// (exact counts for a range, which take precedence). A Density fed only
// COUNT answers is the COUNT estimator. The zero value is ready to use and
// estimates like Uniform until it has observations.
//
// Model: observed ranges have constant density; a newer observation of the
// same source replaces the parts of older ones it overlaps. Inside a COUNT
// range, the pages fix the shape and the COUNT the total: pages keep their
// counts and the rest of the COUNT is spread over the seconds no page
// covered (the pages are scaled to the COUNT instead if they cover it all or
// saw more than it). Between observed ranges the density is interpolated
// linearly; beyond them it continues flat. Each source keeps at most
// maxSegments ranges.
//
// Estimate rebuilds the model lazily, so even reads mutate: like the rest
// of the package, a Density is not safe for concurrent use.
type Density struct {
	pages  []segment
	counts []segment
	// view is the merged, gap-filled model, rebuilt on the first Estimate
	// after an observation.
	view  []piece
	stale bool
}

// segment is an observation: n events in [lo, hi], spread evenly.
type segment struct {
	lo, hi int64
	n      float64
}

func (s segment) seconds() float64 { return Uniform{}.Estimate(s.lo, s.hi) }

// piece is one stretch of the model on the continuous time line, [lo, hi)
// with density d0 at lo rising or falling linearly to d1 at hi; cum is the
// mass of all pieces before it.
type piece struct {
	lo, hi, d0, d1, cum float64
}

// ObservePage records that a page held events events in [since, until]. For a
// page that came back with as many events as asked, pass the oldest
// created_at received and the page's `until`; for the page that drained a
// shard, pass the page's own `since` and `until`. Invalid spans are ignored.
func (d *Density) ObservePage(since, until int64, events int) {
	if since > until || events < 0 {
		return
	}
	d.pages = observe(d.pages, segment{since, until, float64(events)})
	d.stale = true
}

// ObserveCount records a NIP-45 COUNT answer for [since, until]. Invalid
// spans are ignored.
func (d *Density) ObserveCount(since, until int64, count int64) {
	if since > until || count < 0 {
		return
	}
	d.counts = observe(d.counts, segment{since, until, float64(count)})
	d.stale = true
}

// observe inserts s into the sorted, disjoint list, replacing what it
// overlaps; the parts of an older segment left outside s keep their share.
func observe(list []segment, s segment) []segment {
	i := sort.Search(len(list), func(i int) bool { return list[i].hi >= s.lo })
	j := i
	for j < len(list) && list[j].lo <= s.hi {
		j++
	}
	repl := make([]segment, 0, 3)
	if i < j && list[i].lo < s.lo {
		repl = append(repl, clip(list[i], list[i].lo, s.lo-1))
	}
	repl = append(repl, s)
	if i < j && list[j-1].hi > s.hi {
		repl = append(repl, clip(list[j-1], s.hi+1, list[j-1].hi))
	}
	list = slices.Replace(list, i, j, repl...)
	if len(list) > maxSegments {
		list = coarsen(list)
	}
	return list
}

// clip returns the part of s in [lo, hi] (which must overlap s) with its
// share of the events.
func clip(s segment, lo, hi int64) segment {
	c := segment{lo: max(lo, s.lo), hi: min(hi, s.hi)}
	c.n = s.n * c.seconds() / s.seconds()
	return c
}

// coarsen merges neighbours pairwise, folding any gap between them into the
// merged segment.
func coarsen(list []segment) []segment {
	out := list[:0]
	for i := 0; i < len(list); i += 2 {
		s := list[i]
		if i+1 < len(list) {
			s.hi = list[i+1].hi
			s.n += list[i+1].n
		}
		out = append(out, s)
	}
	return out
}

// Estimate returns the modelled number of events in [a, b].
func (d *Density) Estimate(a, b int64) float64 {
	if a > b {
		return 0
	}
	if d.stale {
		d.view = d.build()
		d.stale = false
	}
	if len(d.view) == 0 {
		return Uniform{}.Estimate(a, b)
	}
	return max(0, d.massBelow(float64(b)+1)-d.massBelow(float64(a)))
}

// build merges pages and COUNT answers into disjoint constant-density
// segments, then links them with linearly interpolated gaps.
func (d *Density) build() []piece {
	var segs []segment
	pages := d.pages
	for _, c := range d.counts {
		// Pages wholly before this COUNT range stand on their own.
		for len(pages) > 0 && pages[0].hi < c.lo {
			segs = append(segs, pages[0])
			pages = pages[1:]
		}
		if len(pages) > 0 && pages[0].lo < c.lo { // straddles c.lo
			segs = append(segs, clip(pages[0], pages[0].lo, c.lo-1))
		}
		var inside []segment
		for _, p := range pages {
			if p.lo > c.hi {
				break
			}
			inside = append(inside, clip(p, c.lo, c.hi))
		}
		segs = append(segs, spread(c, inside)...)
		for len(pages) > 0 && pages[0].hi <= c.hi {
			pages = pages[1:]
		}
		if len(pages) > 0 && pages[0].lo <= c.hi { // straddles c.hi
			pages = append([]segment{clip(pages[0], c.hi+1, pages[0].hi)}, pages[1:]...)
		}
	}
	segs = append(segs, pages...)
	return link(segs)
}

// spread distributes a COUNT answer c over its range given the page
// observations inside it (clipped to it, sorted, disjoint): pages keep their
// counts and the remainder fills the uncovered seconds evenly.
func spread(c segment, inside []segment) []segment {
	var seen, covered float64
	for _, p := range inside {
		seen += p.n
		covered += p.seconds()
	}
	uncovered := c.seconds() - covered
	var gapDensity float64
	scale := 1.0
	switch {
	case uncovered > 0 && c.n >= seen:
		gapDensity = (c.n - seen) / uncovered
	case seen > 0:
		scale = c.n / seen // pages saw more than the COUNT: trust the COUNT
	case len(inside) > 0:
		// Neither pages nor gaps can carry the count: spread it by length.
		for i := range inside {
			inside[i].n = c.n * inside[i].seconds() / c.seconds()
		}
	}
	out := make([]segment, 0, 2*len(inside)+1)
	gap := func(lo, hi int64) {
		g := segment{lo: lo, hi: hi}
		g.n = gapDensity * g.seconds()
		out = append(out, g)
	}
	next := c.lo
	for _, p := range inside {
		if p.lo > next {
			gap(next, p.lo-1)
		}
		p.n *= scale
		out = append(out, p)
		if p.hi == c.hi {
			return out // also keeps next from overflowing at the int64 top
		}
		next = p.hi + 1
	}
	gap(next, c.hi)
	return out
}

// link turns sorted, disjoint segments into pieces covering their whole
// span, interpolating the density across the gaps between them.
func link(segs []segment) []piece {
	view := make([]piece, 0, 2*len(segs))
	var cum float64
	add := func(p piece) {
		p.cum = cum
		cum += (p.d0 + p.d1) / 2 * (p.hi - p.lo)
		view = append(view, p)
	}
	for _, s := range segs {
		lo, hi := float64(s.lo), float64(s.hi)+1
		d := s.n / s.seconds()
		if len(view) > 0 {
			prev := view[len(view)-1]
			if lo > prev.hi {
				add(piece{lo: prev.hi, hi: lo, d0: prev.d1, d1: d})
			}
		}
		if hi > lo { // at the int64 extremes float64 cannot tell seconds apart
			add(piece{lo: lo, hi: hi, d0: d, d1: d})
		}
	}
	return view
}

// massBelow is the modelled number of events before time x, relative to the
// start of the first piece (negative before it).
func (d *Density) massBelow(x float64) float64 {
	first, last := d.view[0], d.view[len(d.view)-1]
	if x <= first.lo {
		return -(first.lo - x) * first.d0
	}
	if x >= last.hi {
		return last.cum + (last.d0+last.d1)/2*(last.hi-last.lo) + (x-last.hi)*last.d1
	}
	i := sort.Search(len(d.view), func(i int) bool { return d.view[i].hi > x }) // piece holding x
	p := d.view[i]
	u := x - p.lo
	return p.cum + p.d0*u + (p.d1-p.d0)*u*u/(2*(p.hi-p.lo))
}
