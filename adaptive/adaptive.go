// Package adaptive decides how hard to crawl one relay: how many
// connections, and how many REQs in flight on each.
//
// The relay's real limits are unknown (NIP-11 is a prior, often missing or
// wrong) and they move (a relay's sweet spot shifts as its data grows), so
// the Controller measures and adapts: it starts in slow start, doubling
// one dimension per measurement while each doubling pays (a relay far from
// its limits is found in a few epochs, not dozens), then additive increase
// while throughput keeps rising and page latency holds, alternating
// between REQs per connection and connections; multiplicative decrease on any refusal, with
// learned ceilings for the limits a refusal reveals; and, after a quiet
// period, a cautious probe back up, because a peer's limiter that only goes
// down would starve a relay whose limits were lifted.
//
// It is pure logic: no I/O, no goroutines, no clock. Time comes in with
// each call, so tests run it in virtual time. Not safe for concurrent use.
package adaptive

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Refusal is a signal that the relay wants less from us.
type Refusal uint8

const (
	// RateLimited: CLOSED with a "rate-limited:" reason.
	RateLimited Refusal = iota + 1
	// ClosedError: CLOSED with any other error reason (e.g. "error:").
	ClosedError
	// TooManyREQs: the relay's per-connection subscription cap, e.g.
	// strfry's NOTICE "ERROR: too many concurrent REQs" that comes with no
	// CLOSED and no EOSE (detected by the text, or by a timeout on a
	// connection that has already shown it).
	TooManyREQs
	// HTTP429: the WebSocket upgrade was answered 429 (too many
	// connections or requests from our IP).
	HTTP429
	// Dropped: the relay closed a connection mid-job (strfry drops a
	// client with too much unsent output).
	Dropped
	// Timeout: a page got no answer in time.
	Timeout
	// LimitRejected: a REQ was refused for its `limit` being too large
	// (nostream, rnostr: "invalid: ... limit ..."). It halves the page
	// limit and leaves concurrency alone.
	LimitRejected
	numRefusals
)

var refusalNames = [...]string{"", "rate-limited", "closed-error", "too-many-reqs", "http-429", "dropped", "timeout", "limit-rejected"}

func (r Refusal) String() string {
	if r > 0 && r < numRefusals {
		return refusalNames[r]
	}
	return fmt.Sprintf("Refusal(%d)", uint8(r))
}

// Reason says why the target changed.
type Reason uint8

const (
	// ReasonIncrease: the last measurement kept throughput rising.
	ReasonIncrease Reason = iota + 1
	// ReasonNoGain: the last increase did not raise throughput enough; undone.
	ReasonNoGain
	// ReasonLatency: the last increase inflated p50 page latency; undone.
	ReasonLatency
	// ReasonRefusal: multiplicative decrease on a refusal.
	ReasonRefusal
	// ReasonCeiling: a refusal during the hold after a decrease lowered a
	// learned ceiling below the target.
	ReasonCeiling
	// ReasonProbe: a quiet period passed; one step past what was learned.
	ReasonProbe
)

var reasonNames = [...]string{"", "increase", "no-gain", "latency", "refusal", "ceiling", "probe"}

func (r Reason) String() string {
	if int(r) > 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Change is one decision, for logs and stats.
type Change struct {
	At     time.Time
	Reason Reason
	// Refusal is the signal behind ReasonRefusal and ReasonCeiling.
	Refusal                 Refusal
	FromConns, FromInflight int
	Conns, Inflight         int
	// Throughput (events/s) and LatencyP50 of the epoch that decided an
	// increase, undo or probe; zero for refusals.
	Throughput float64
	LatencyP50 time.Duration
}

func (c Change) String() string {
	s := fmt.Sprintf("%dx%d -> %dx%d: %s", c.FromConns, c.FromInflight, c.Conns, c.Inflight, c.Reason)
	if c.Refusal != 0 {
		s += " (" + c.Refusal.String() + ")"
	}
	if c.Throughput > 0 {
		s += fmt.Sprintf(" at %.0f events/s, p50 %v", c.Throughput, c.LatencyP50)
	}
	return s
}

// Controller is one relay's concurrency controller.
type Controller struct {
	cfg        Config
	capC, capR int // hard caps: user caps and NIP-11

	conns, inflight int
	// Learned ceilings (0 = none): connections, REQs per connection, and
	// total REQs in flight.
	ceilC, ceilR, ceilT int
	// satC/satR: the last increase of that dimension did not pay.
	satC, satR bool
	connNext   bool  // the next increase tries connections first
	slow       bool  // slow start: increases double until one does not pay
	step       *step // the increase being measured, if any

	ep       epoch
	baseline float64 // events/s at the configuration before the step
	best     time.Duration
	last     measurement

	quiet     time.Duration
	probeAt   time.Time // no probe before this
	holdUntil time.Time // refusals before this do not decrease again
	heldFrom  [2]int    // conns, inflight when the hold began

	pageLimit           int
	clampSize, clampHit int

	refusals [numRefusals]int
	changes  []Change // ring of the last cfg.History
	nchanges int
}

type step struct {
	conn         bool // which dimension grew
	fromC, fromR int
	probe        bool
}

type epoch struct {
	warm      int // pages still to ignore
	from      time.Time
	pages     int
	events    int64
	bytes     int64
	latencies []time.Duration // bounded sample
}

type measurement struct {
	events, bytes float64 // per second
	p50           time.Duration
}

// maxSamples bounds the latencies an epoch keeps for its p50.
const maxSamples = 1024

// New returns a controller at the configured start, clamped to the caps.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{cfg: cfg, capC: cfg.MaxConns, capR: cfg.MaxInflightPerConn, quiet: cfg.QuietPeriod, connNext: true, slow: true}
	if cfg.MaxSubscriptions > 0 {
		c.capR = min(c.capR, cfg.MaxSubscriptions)
	}
	c.conns, c.inflight = min(cfg.StartConns, c.capC), min(cfg.StartInflightPerConn, c.capR)
	c.pageLimit = cfg.PageLimit
	if cfg.MaxLimit > 0 {
		c.pageLimit = min(c.pageLimit, cfg.MaxLimit)
	}
	c.restart(time.Time{}, c.conns*c.inflight)
	return c, nil
}

// Target returns how many connections to keep open and how many REQs to
// keep in flight on each.
func (c *Controller) Target() (conns, inflightPerConn int) { return c.conns, c.inflight }

// PageDone feeds back one page answered with EOSE: how many events and
// bytes it brought and how long it took from REQ to EOSE.
func (c *Controller) PageDone(now time.Time, events, bytes int, latency time.Duration) {
	e := &c.ep
	if e.warm > 0 { // pages sent under the previous configuration
		e.warm--
		e.from = now
		return
	}
	e.pages++
	e.events += int64(events)
	e.bytes += int64(bytes)
	if len(e.latencies) < maxSamples {
		e.latencies = append(e.latencies, latency)
	} else {
		e.latencies[e.pages%maxSamples] = latency
	}
	elapsed := now.Sub(e.from)
	// Slow start's doublings must gain half again to be kept, which half
	// of MinEpoch measures well enough (long enough for new connections to
	// be dialed); the additive steps need all of it.
	minEpoch := c.cfg.MinEpoch
	if c.slow {
		minEpoch /= 2
	}
	if e.pages < c.cfg.EpochRounds*c.conns*c.inflight || elapsed < minEpoch {
		return
	}
	c.last = measurement{
		events: float64(e.events) / elapsed.Seconds(),
		bytes:  float64(e.bytes) / elapsed.Seconds(),
		p50:    median(e.latencies),
	}
	c.evaluate(now)
}

// evaluate ends an epoch: judge the step it measured, then try the next one.
func (c *Controller) evaluate(now time.Time) {
	m := c.last
	inflated := c.best > 0 && float64(m.p50) > c.cfg.LatencyFactor*float64(c.best)
	if c.best == 0 || m.p50 < c.best {
		c.best = m.p50
	}
	if s := c.step; s != nil {
		c.step = nil
		from := s.fromC * s.fromR
		linear := float64(c.conns*c.inflight-from) / float64(from)
		// Zero stays zero: pages that bring nothing never justify more.
		paid := m.events > 0 && m.events >= c.baseline*(1+c.cfg.GainFraction*linear)
		if inflated || !paid {
			reason := ReasonNoGain
			if inflated {
				reason = ReasonLatency
			}
			if s.conn {
				c.satC = true
			} else {
				c.satR = true
			}
			c.slow = false
			c.probeAt = now.Add(c.quiet)
			c.set(now, s.fromC, s.fromR, reason, 0)
			c.increase(now) // the other dimension, from the same baseline
			return
		}
		if s.probe { // the limit that was learned has moved: forget it
			c.quiet = c.cfg.QuietPeriod
			if c.conns > c.ceilC {
				c.ceilC = 0
			}
			if c.inflight > c.ceilR {
				c.ceilR = 0
			}
			if c.conns*c.inflight > c.ceilT {
				c.ceilT = 0
			}
		}
	}
	c.baseline = m.events
	if !c.increase(now) {
		c.restart(now, 0) // hold: same configuration, keep measuring
	}
}

// increase takes one additive step if a dimension may grow, alternating
// between them; past the quiet period it may step past learned ceilings.
// It reports whether it stepped.
func (c *Controller) increase(now time.Time) bool {
	order := [2]bool{c.connNext, !c.connNext}
	for _, conn := range order {
		if c.allowed(conn, false) {
			c.grow(now, conn, false)
			return true
		}
	}
	if now.Before(c.probeAt) {
		return false
	}
	c.satC, c.satR = false, false
	for _, conn := range order {
		if c.allowed(conn, true) {
			c.grow(now, conn, true)
			return true
		}
	}
	return false // at the hard caps
}

func (c *Controller) allowed(conn, probe bool) bool {
	nc, nr := c.conns, c.inflight
	if conn {
		nc++
	} else {
		nr++
	}
	switch {
	case nc > c.capC || nr > c.capR:
		return false
	case probe:
		return true
	case conn && c.satC, !conn && c.satR:
		return false
	}
	return under(nc, c.ceilC) && under(nr, c.ceilR) && under(nc*nr, c.ceilT)
}

// orMax is a ceiling with 0 (none) read as no limit.
func orMax(ceiling int) int {
	if ceiling == 0 {
		return math.MaxInt
	}
	return ceiling
}

// under reports whether v respects ceiling (0 = none).
func under(v, ceiling int) bool { return ceiling == 0 || v <= ceiling }

// grow steps one dimension up by one, or in slow start doubles it as far
// as the caps and learned ceilings allow (allowed has checked that one
// more fits).
func (c *Controller) grow(now time.Time, conn, probe bool) {
	c.step = &step{conn: conn, fromC: c.conns, fromR: c.inflight, probe: probe}
	c.connNext = !conn
	nc, nr := c.conns, c.inflight
	if conn {
		nc++
		if c.slow && !probe {
			nc = max(nc, min(2*c.conns, c.capC, orMax(c.ceilC), orMax(c.ceilT)/nr))
		}
	} else {
		nr++
		if c.slow && !probe {
			nr = max(nr, min(2*c.inflight, c.capR, orMax(c.ceilR), orMax(c.ceilT)/nc))
		}
	}
	reason := ReasonIncrease
	if probe {
		reason = ReasonProbe
	}
	c.set(now, nc, nr, reason, 0)
}

// Refused feeds back a refusal signal. Call it for every refused REQ or
// connection: refusals within the hold after a decrease count as one
// overload (they may still tighten a ceiling), so a burst is not punished
// once per REQ.
func (c *Controller) Refused(now time.Time, kind Refusal) {
	if kind == 0 || kind >= numRefusals {
		return
	}
	c.refusals[kind]++
	if kind == LimitRejected {
		c.pageLimit = max(1, c.pageLimit/2)
		return
	}
	held := now.Before(c.holdUntil)
	from := [2]int{c.conns, c.inflight}
	if held { // the refused REQs were sent before the last decrease
		from = c.heldFrom
	}
	switch kind {
	case TooManyREQs:
		c.ceilR = lower(c.ceilR, from[1]-1)
	case HTTP429:
		c.ceilC = lower(c.ceilC, from[0]-1)
	case RateLimited:
		c.ceilT = lower(c.ceilT, from[0]*from[1]-1)
	}
	nc, nr := c.conns, c.inflight
	reason := ReasonCeiling
	if !held {
		reason = ReasonRefusal
		switch {
		case kind == HTTP429:
			nc = c.backoff(nc)
		case kind == TooManyREQs, kind == Dropped, nr >= nc:
			nr = c.backoff(nr)
		default:
			nc = c.backoff(nc)
		}
		if c.step != nil && c.step.probe {
			c.quiet = min(2*c.quiet, c.cfg.MaxQuietPeriod)
		}
		c.step = nil
		c.slow = false
		c.satC, c.satR = false, false // the regime changed: climb back to the ceilings
		c.baseline = 0
		c.heldFrom = from
		c.holdUntil = now.Add(max(c.cfg.RefusalHold, 2*c.last.p50))
		c.probeAt = now.Add(c.quiet)
	}
	// Keep the target within the ceilings, except where a ceiling cannot
	// hold it (1x1 is the floor).
	if c.ceilC > 0 {
		nc = min(nc, c.ceilC)
	}
	if c.ceilR > 0 {
		nr = min(nr, c.ceilR)
	}
	for c.ceilT > 0 && nc*nr > c.ceilT && (nc > 1 || nr > 1) {
		if nr >= nc {
			nr--
		} else {
			nc--
		}
	}
	if nc != c.conns || nr != c.inflight {
		c.set(now, nc, nr, reason, kind)
	} else if !held {
		c.restart(now, c.conns*c.inflight) // pages in flight now met the refusal
	}
}

func (c *Controller) backoff(v int) int { return max(1, int(float64(v)*c.cfg.Backoff)) }

// lower returns the tighter of a ceiling (0 = none) and v, at least 1.
func lower(ceiling, v int) int {
	v = max(1, v)
	if ceiling == 0 {
		return v
	}
	return min(ceiling, v)
}

// set applies a new target, logs it and starts a new epoch.
func (c *Controller) set(now time.Time, conns, inflight int, reason Reason, kind Refusal) {
	ch := Change{
		At: now, Reason: reason, Refusal: kind,
		FromConns: c.conns, FromInflight: c.inflight, Conns: conns, Inflight: inflight,
	}
	if reason != ReasonRefusal && reason != ReasonCeiling {
		ch.Throughput, ch.LatencyP50 = c.last.events, c.last.p50
	}
	c.conns, c.inflight = conns, inflight
	// Pages sent under the old target finish during the warm-up.
	c.restart(now, max(conns*inflight, ch.FromConns*ch.FromInflight))
	if c.cfg.History > 0 {
		if len(c.changes) < c.cfg.History {
			c.changes = append(c.changes, ch)
		} else {
			c.changes[c.nchanges%c.cfg.History] = ch
		}
	}
	c.nchanges++
	if c.cfg.OnChange != nil {
		c.cfg.OnChange(ch)
	}
}

// restart begins an epoch at now that first ignores warm pages.
func (c *Controller) restart(now time.Time, warm int) {
	c.ep = epoch{warm: warm, from: now, latencies: c.ep.latencies[:0]}
}

// PageSize feeds back the number of events of a page that was not the last
// of its shard (the next page brought older events): a relay that keeps
// answering such pages with the same count below the asked limit is
// clamping to it.
func (c *Controller) PageSize(n int) {
	switch {
	case n <= 0 || n >= c.pageLimit:
	case n > c.clampSize:
		c.clampSize, c.clampHit = n, 1
	case n == c.clampSize:
		c.clampHit++
	}
}

// EffectivePageLimit is the `limit` to ask for: the configured one (capped
// by NIP-11 max_limit, halved on LimitRejected) until pages reveal a smaller
// clamp. A page that brings this many events is full.
func (c *Controller) EffectivePageLimit() int {
	if c.clampHit >= c.cfg.ClampEvidence && c.clampSize < c.pageLimit {
		return c.clampSize
	}
	return c.pageLimit
}

// Changes returns the most recent changes (up to Config.History), oldest
// first.
func (c *Controller) Changes() []Change {
	if len(c.changes) < c.cfg.History {
		return slices.Clone(c.changes)
	}
	i := c.nchanges % c.cfg.History
	return append(slices.Clone(c.changes[i:]), c.changes[:i]...)
}

// State is a snapshot for stats.
type State struct {
	Conns, InflightPerConn int
	// Learned ceilings, 0 = none.
	CeilConns, CeilInflightPerConn, CeilInflight int
	// Of the last measured epoch.
	EventsPerSec, BytesPerSec float64
	LatencyP50                time.Duration
	BestLatencyP50            time.Duration
	PageLimit                 int
	// NextProbe is the earliest time the controller may probe past what it
	// learned.
	NextProbe time.Time
	Refusals  map[Refusal]int
	Changes   int // total changes so far
}

// State returns a snapshot for stats.
func (c *Controller) State() State {
	st := State{
		Conns: c.conns, InflightPerConn: c.inflight,
		CeilConns: c.ceilC, CeilInflightPerConn: c.ceilR, CeilInflight: c.ceilT,
		EventsPerSec: c.last.events, BytesPerSec: c.last.bytes,
		LatencyP50: c.last.p50, BestLatencyP50: c.best,
		PageLimit: c.EffectivePageLimit(), NextProbe: c.probeAt,
		Refusals: map[Refusal]int{}, Changes: c.nchanges,
	}
	for k, n := range c.refusals {
		if n > 0 {
			st.Refusals[Refusal(k)] = n
		}
	}
	return st
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
