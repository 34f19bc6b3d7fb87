package crawl

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"math"
	"slices"

	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/relayconn"
	"github.com/nostr-archiver/archiver/shard"
	"go.uber.org/zap"
)

// RangeCoverage says how one created_at range of a relay's crawl is known
// to be held, or why it is not. Until 0 means no upper bound (an open job's
// newest range, future-dated events included).
type RangeCoverage struct {
	Since int64 `json:"since"`
	Until int64 `json:"until"`
	// Proof is ProofPaged, ProofCount or ProofUnproven.
	Proof string `json:"proof"`
	Held  int64  `json:"held"`            // distinct events of the relay the archive holds in the range (and malformed frames it served)
	Count int64  `json:"count,omitempty"` // the relay's NIP-45 COUNT for it, when answered
	// Repaged counts the times a short range was paged again.
	Repaged int    `json:"repaged,omitempty"`
	Why     string `json:"why,omitempty"`
	At      int64  `json:"at"`
}

// Proofs of a range.
const (
	ProofPaged    = "paged"    // paged to the end; no exact COUNT or NIP-77 checks it
	ProofCount    = "count"    // paged to the end, and the relay's COUNT is no more than held
	ProofNIP77    = "nip77"    // reconciled over NIP-77: the relay has no event in the range the archive lacks
	ProofUnproven = "unproven" // the relay's COUNT says more than paging (even again) yields
)

// proofStrength orders the proofs of a drained relay, weakest first.
var proofStrength = map[string]int{ProofPaged: 1, ProofCount: 2, ProofNIP77: 3}

// weakestProof is the proof every range of cs has at least ("" for none).
func weakestProof(cs []RangeCoverage) string {
	weakest := ""
	for _, c := range cs {
		if weakest == "" || proofStrength[c.Proof] < proofStrength[weakest] {
			weakest = c.Proof
		}
	}
	return weakest
}

// mergeCoverage is the record's coverage after a run whose audit covered
// fresh: what an earlier run recorded of the ranges this run did not
// page stands (a run that resumes a finished crawl pages only the range
// since its end, and dropping the rest forgot ranges the relay never
// served whole: the next run said drained). An earlier range that a
// fresh one covers whole is replaced; one whose top a fresh one covers
// (an open range, or the overlap a resumed open job pages again) ends
// where the fresh one begins; one covered in part otherwise stays too,
// its proof no stronger than it was. Neighbours proven alike are joined,
// so that the record does not grow with every catch-up of a tailed relay.
func mergeCoverage(earlier, fresh []RangeCoverage) []RangeCoverage {
	out := slices.Clone(fresh)
	slices.SortStableFunc(out, func(x, y RangeCoverage) int { return cmp.Compare(x.Since, y.Since) })
	for _, e := range earlier {
		e.Until = topCovered(e, out)
		if !slices.ContainsFunc(fresh, func(f RangeCoverage) bool { return covers(f, e) }) {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(x, y RangeCoverage) int { return cmp.Compare(x.Since, y.Since) })
	return JoinCoverage(out)
}

// topCovered returns e's Until, or, if fresh (sorted by Since) holds
// ranges that touch one another from above e's Since to e's top, the
// second before the lowest of them.
func topCovered(e RangeCoverage, fresh []RangeCoverage) int64 {
	for i, f := range fresh {
		if f.Since <= e.Since || e.Until != 0 && f.Since > e.Until {
			continue
		}
		end := f.Until // 0: open
		for _, g := range fresh[i+1:] {
			if end == 0 || e.Until != 0 && end >= e.Until || g.Since > end+1 {
				break
			}
			if g.Until == 0 || g.Until > end {
				end = g.Until
			}
		}
		if end == 0 || e.Until != 0 && end >= e.Until {
			return f.Since - 1
		}
	}
	return e.Until
}

// covers reports whether range a holds all of range b (Until 0: open).
func covers(a, b RangeCoverage) bool {
	return a.Since <= b.Since && (a.Until == 0 || b.Until != 0 && b.Until <= a.Until)
}

// maxNegAudit bounds the ids of a range reconciled over NIP-77 in one
// piece (the archive's side is held in memory, 40 bytes an id); larger
// ranges are checked by COUNT.
const maxNegAudit = 1 << 20

// maxRepages bounds how often a range whose COUNT disagrees is paged again.
const maxRepages = 2

// tally is what the audit needs of one shard's paging this run: where
// the run started it, and the malformed frames its pages carried (the
// relay's COUNT counts what it serves as malformed too). What the range
// holds is counted from the archive at audit time, never from pages: a
// page asked before a steal split the shard also carries events of the
// part given away, and counting those as held proved a range that was
// missing events.
type tally struct {
	top       int64 // the cursor this run started the shard at
	malformed int64
}

// tally counts a page of shard s (as it stood when the page was asked)
// and shows its authors to the known-author set.
func (r *relayCrawl) tally(s shard.Shard, items []relayconn.Item, malformed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.known.observe(items)
	t := r.tallies[s.ID]
	if t == nil {
		t = &tally{top: s.Cursor}
		r.tallies[s.ID] = t
	}
	t.malformed += int64(malformed)
}

// held counts the distinct events in [since, until] that the archive holds
// from this relay and that match the crawl's filter.
func (r *relayCrawl) held(since, until int64) (int64, error) {
	var match func(raw []byte) bool
	if len(r.c.opts.Kinds) > 0 || len(r.c.opts.Authors) > 0 {
		kinds := map[int]bool{}
		for _, k := range r.c.opts.Kinds {
			kinds[k] = true
		}
		authors := map[string]bool{}
		for _, a := range r.c.opts.Authors {
			authors[a] = true
		}
		match = func(raw []byte) bool {
			e, err := event.Parse(raw)
			return err == nil && (len(kinds) == 0 || kinds[e.Kind]) &&
				(len(authors) == 0 || authors[hex.EncodeToString(e.PubKey[:])])
		}
	}
	hi := uint64(math.MaxUint64)
	if until != shard.OpenTop {
		hi = uint64(until)
	}
	return r.c.opts.Store.CountServed(r.idx, uint64(max(since, 0)), hi, match)
}

// observeAuthors shows items' authors to the known-author set.
func (r *relayCrawl) observeAuthors(items []relayconn.Item) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.known.observe(items)
}

// audit checks every range this run paged against the relay's NIP-45
// COUNT (with the job's filter), pages again a range that holds fewer than
// the relay counts (up to maxRepages times), and records how each range
// stands. Shards of this generation finished by an earlier run are
// recorded as paged; with Recheck, what lies below the generation is
// checked again (recheck).
func (r *relayCrawl) audit(ctx context.Context) []RangeCoverage {
	r.mu.Lock()
	paged := len(r.tallies) > 0
	if !paged && !r.c.opts.Recheck {
		r.mu.Unlock()
		return nil // nothing paged this run: the record keeps what it had
	}
	shards := r.queue.Shards()
	type rng struct {
		since, until int64
		malformed    int64
		earlier      bool
	}
	var todo []rng
	below := shard.OpenTop // the lowest second of this generation's shards
	for _, s := range shards {
		below = min(below, s.Since)
		switch t := r.tallies[s.ID]; {
		case !paged:
		case t != nil:
			todo = append(todo, rng{s.Since, t.top, t.malformed, false})
		default:
			todo = append(todo, rng{s.Since, s.Until, 0, true})
		}
	}
	jobSince := r.job.meta.Since
	r.mu.Unlock()
	now := r.c.opts.Now().Unix()
	var out []RangeCoverage
	for _, g := range todo {
		if ctx.Err() != nil {
			break
		}
		c := RangeCoverage{Since: g.since, Until: g.until, Proof: ProofPaged, At: now}
		capped := false // the relay's COUNT of it (checkRange)
		if g.until == shard.OpenTop {
			c.Until = 0
		}
		held, err := r.held(g.since, g.until)
		c.Held = held + g.malformed
		if err == nil && r.nip77 && held <= maxNegAudit {
			// Reconciliation proves the range whatever COUNT says, and
			// fetches what the pages missed.
			ok, fetched, nerr := r.negRange(ctx, g.since, g.until)
			if nerr == nil && ok {
				c.Proof, c.Held = ProofNIP77, held+int64(fetched)+g.malformed
				out = append(out, c)
				continue
			}
			r.log.Info("NIP-77 could not prove the range; COUNT is checked instead", zap.Int64("since", g.since),
				zap.Int64("until", g.until), zap.Bool("complete", ok), zap.Error(nerr))
		}
		switch {
		case err != nil:
			c.Proof, c.Why = ProofUnproven, fmt.Sprintf("counting what the archive holds: %v", err)
		case g.earlier:
			c.Why = "paged by an earlier run"
		case !r.count:
			c.Why = "the relay answers no COUNT"
		default:
			capped = r.checkRange(ctx, &c, g.since, g.until, g.malformed)
		}
		parts := []RangeCoverage{c}
		if capped && c.Count > int64(r.limit) && g.until > g.since {
			// A capped count may be exact in parts: they prove the range,
			// or show what its pages left out (a relay leaving out the
			// same events every time, its COUNT capped, was drained).
			parts = r.countParts(ctx, g.since, g.until, now)
		}
		for _, c := range parts {
			lies := r.lies()
			if c.Proof == ProofCount && lies != "" && r.countCap.Load() > 0 {
				// Its COUNT was seen under what it serves: counted in
				// parts, it may undercount them too, as its pages leave
				// events out.
				c.Proof, c.Why = ProofPaged, whyCountUnder
			}
			if c.Proof == ProofPaged && lies != "" {
				c.Proof, c.Why = ProofUnproven, "paged, but the relay "+lies+"; and "+c.Why
			}
			out = append(out, c)
		}
	}
	if r.c.opts.Recheck && below > jobSince && ctx.Err() == nil {
		out = append(out, r.recheck(ctx, jobSince, below-1, now)...)
	}
	if r.broadFilter() && servedNothing(out) && ctx.Err() == nil {
		r.askBroad(ctx, out)
	}
	return out
}

// recheck checks [since, until], which earlier runs paged, against the
// relay again: events published with an old created_at while no tail was
// connected (the daemon was down, a connection dropped) lie in ranges no
// later pass pages. A range held in full as the relay counts it is proven
// afresh; a range counted short is halved until a half is a few pages'
// worth, which is paged again (checkRange), so that a handful of such
// events costs COUNTs, not a crawl of the relay. Over NIP-77 the range is
// reconciled instead, in pieces of at most recheckNegItems ids. It
// returns the ranges it proved or found short; none where the relay
// answers neither (the record's word stands), unless RecheckByPaging
// pages them again.
func (r *relayCrawl) recheck(ctx context.Context, since, until, now int64) []RangeCoverage {
	if ctx.Err() != nil {
		return nil
	}
	held, err := r.held(since, until)
	if err != nil {
		return []RangeCoverage{{Since: since, Until: until, Proof: ProofUnproven, Why: fmt.Sprintf("counting what the archive holds: %v", err), At: now}}
	}
	if r.nip77 {
		if held > recheckNegItems && until > since {
			return r.recheckHalves(ctx, since, until, now)
		}
		if ok, fetched, err := r.negRange(ctx, since, until); err == nil && ok {
			return []RangeCoverage{{Since: since, Until: until, Proof: ProofNIP77, Held: held + int64(fetched), At: now}}
		}
	}
	if !r.count {
		if !r.c.opts.RecheckByPaging {
			return nil
		}
		r.log.Info("paging again what earlier runs paged: the relay answers neither NIP-77 nor COUNT", zap.Int64("since", since), zap.Int64("until", until))
		c := RangeCoverage{Since: since, Until: until, Proof: ProofPaged, Why: "paged again by a recheck; the relay answers neither NIP-77 nor COUNT", At: now}
		var err error
		if c.Held, err = r.repageHeld(ctx, since, until, 0); err != nil {
			c.Proof, c.Why = ProofUnproven, fmt.Sprintf("paging again: %v", err)
		}
		return []RangeCoverage{c}
	}
	rc, ok := r.countEvents(ctx, since, until)
	if !ok {
		return nil
	}
	c := RangeCoverage{Since: since, Until: until, Proof: ProofPaged, Held: held, Count: rc.n, At: now}
	switch {
	case rc.proves() && rc.n <= held:
		c.Proof = ProofCount
		if rc.n < held {
			// A count at or over one the relay was shown to cap is halved
			// without paging to show it again.
			why := whyCountCapped
			if capAt := r.countCap.Load(); capAt == 0 || rc.n < capAt {
				why = r.countShort(ctx, since, until, rc.n, held)
			}
			if why != "" && until > since && rc.n > int64(r.limit) {
				return r.recheckHalves(ctx, since, until, now) // exact in parts, maybe
			}
			if why != "" {
				c.Proof, c.Why = ProofPaged, why
			}
		}
		return []RangeCoverage{c}
	case until > since && rc.n > int64(recheckPages*r.limit):
		return r.recheckHalves(ctx, since, until, now)
	case until > since && !rc.proves() && rc.n > int64(r.limit):
		// A capped count may be exact in parts. One approximate however
		// small (HyperLogLog's) would be halved down to single seconds,
		// a COUNT each, over the relay's whole history: halved only
		// while it counts more than a page.
		return r.recheckHalves(ctx, since, until, now)
	case !rc.proves() && rc.n <= held:
		// Nothing shown missing, nothing proven.
		c.Why = whyCountApprox
		return []RangeCoverage{c}
	}
	r.log.Info("a range paged before is short of the relay's COUNT now; paging it again", zap.Int64("since", since),
		zap.Int64("until", until), zap.Int64("count", rc.n), zap.Int64("held", held))
	r.checkRange(ctx, &c, since, until, 0)
	return []RangeCoverage{c}
}

// countParts is recheck's halves of [since, until], a range this run
// paged whose COUNT is approximate or under what the relay serves (see
// checkRange); the open range's halves are those of [since, a minute from
// now], and what lies above.
func (r *relayCrawl) countParts(ctx context.Context, since, until, now int64) []RangeCoverage {
	if until != shard.OpenTop {
		return r.recheckHalves(ctx, since, until, now)
	}
	top := max(since, r.c.opts.Now().Add(liveMargin).Unix())
	parts := append(r.recheck(ctx, since, top, now), r.recheck(ctx, top+1, until, now)...)
	for i := range parts {
		if parts[i].Until == shard.OpenTop {
			parts[i].Until = 0
		}
	}
	return parts
}

// recheckHalves rechecks the two halves of [since, until].
func (r *relayCrawl) recheckHalves(ctx context.Context, since, until, now int64) []RangeCoverage {
	mid := since + (until-since)/2
	return append(r.recheck(ctx, since, mid, now), r.recheck(ctx, mid+1, until, now)...)
}

// recheckNegItems bounds the archive's ids of one piece a recheck
// reconciles over NIP-77 (held in memory, 40 bytes each: 5 MiB): the daemon
// rechecks every relay's whole history at start, several relays at once.
const recheckNegItems = 1 << 17

// recheckPages is how many pages' worth of events a range counted short
// on a recheck may hold and be paged again whole rather than halved.
const recheckPages = 4

// JoinCoverage joins neighbouring ranges (in the record's order) that
// touch and were proven the same way for the same reason: a
// crawl records one per shard, dozens of lines saying the same. What
// they hold and count is summed; the joined range was proven at the
// oldest of their times.
func JoinCoverage(cs []RangeCoverage) []RangeCoverage {
	var out []RangeCoverage
	for _, c := range cs {
		if n := len(out); n > 0 {
			p := &out[n-1]
			if p.Proof == c.Proof && p.Why == c.Why && p.Repaged == 0 && c.Repaged == 0 && p.Until != 0 && p.Until+1 == c.Since {
				p.Until, p.Held, p.Count, p.At = c.Until, p.Held+c.Held, p.Count+c.Count, min(p.At, c.At)
				continue
			}
		}
		out = append(out, c)
	}
	return out
}

// whyEmpty is why a relay that served nothing at all is not proven empty.
const whyEmpty = "the relay served no event at all, not even to a filter without bounds, and answers neither COUNT nor NIP-77 to show it holds none; " +
	"some relays answer broad filters with nothing (nostr-rs-relay with limit_scrapers): try --kinds with --authors"

// broadFilter reports whether the crawl's filter is one a relay may
// refuse as a scraper's: nostr-rs-relay wants at least two of ids,
// authors, kinds and tags.
func (r *relayCrawl) broadFilter() bool {
	return len(r.c.opts.Kinds) == 0 || len(r.c.opts.Authors) == 0
}

// askBroad asks a relay whose every range paged empty for any one event
// with the broadest filter there is, up to broadTries times (an answer
// may end before its event, or be refused). One that serves none may
// answer every filter with nothing: its ranges are unproven. One that
// serves an event in a range whose pages it answered with nothing lied to
// them: the event is stored and the range is unproven. Otherwise the
// ranges are empty indeed (a job split in time often has empty parts).
func (r *relayCrawl) askBroad(ctx context.Context, out []RangeCoverage) {
	var page *relayconn.Page
	for range broadTries {
		p, _, err := r.fetch(ctx, []byte(`{"limit":1}`))
		if err == nil && p.End == relayconn.EndEOSE && len(p.Items) > 0 {
			page = p
			break
		}
		if ctx.Err() != nil {
			return
		}
	}
	if page == nil {
		for i := range out {
			out[i].Proof, out[i].Why = ProofUnproven, whyEmpty
		}
		return
	}
	_, err := r.commit(page.Items, nil, nil)
	page.Release()
	if err != nil {
		r.log.Warn("storing the event served to a filter without bounds", zap.Error(err))
		return
	}
	for i := range out {
		until := out[i].Until
		if until == 0 {
			until = shard.OpenTop
		}
		held, err := r.held(out[i].Since, until)
		switch {
		case err != nil:
			out[i].Proof, out[i].Why = ProofUnproven, whyBroadServed
			continue
		case held == 0:
			continue
		}
		// Paged again, its empty answers asked for again: its pages may
		// have been answered before their events (a relay answering
		// runs of REQs so, then dropping them, answered a shard's first
		// page and every probe after it with nothing: 1 of its 3,000
		// events was archived).
		r.lie(lieEmptied, fmt.Sprintf("answered the pages of [%d, %s] with nothing, but served an event in it to a filter without bounds", out[i].Since, untilText(out[i].Until)))
		if again, err := r.repageHeld(ctx, out[i].Since, until, 0); err == nil {
			held = again
		} else {
			r.log.Warn("paging again a range answered empty", zap.Int64("since", out[i].Since), zap.Error(err))
		}
		out[i].Proof, out[i].Why, out[i].Held = ProofUnproven, whyBroadServed, held
	}
}

// broadTries bounds the asks of askBroad.
const broadTries = 3

// whyBroadServed is why a range paged empty is unproven when the relay
// serves an event in it to a filter without bounds.
const whyBroadServed = "the relay answered this range's pages with nothing, but served an event in it to a filter without bounds"

// servedNothing reports whether every range is merely paged and holds
// nothing: the sign of a relay that answers each page with an empty EOSE.
func servedNothing(cs []RangeCoverage) bool {
	for _, c := range cs {
		if c.Proof != ProofPaged || c.Held != 0 {
			return false
		}
	}
	return len(cs) > 0
}

// checkRange compares c's held count with the relay's COUNT for [since,
// until], paging the range again while it is short (a relay that drops
// other events each pass is read whole by the passes together) and
// counting again what the archive holds. An approximate COUNT proves
// nothing (the range stays paged), but one above what is held is paged
// again like an exact one, and left unproven if it stays above.
//
// It reports whether the COUNT proved nothing for being approximate or
// under what the relay serves (a capped count): one that may be exact in
// parts of the range (countParts).
func (r *relayCrawl) checkRange(ctx context.Context, c *RangeCoverage, since, until, malformed int64) (capped bool) {
	for {
		rc, ok := r.countEvents(ctx, since, until)
		if !ok {
			c.Why = whyCountFailed
			return false
		}
		// Events that came after their pages' EOSE (the last page paged
		// again had none after it to take them) count too.
		if late := r.conns.takeLate(); len(late.Items) > 0 || late.DroppedAfterEOSE {
			r.storeLate(late)
			if held, err := r.held(since, until); err == nil {
				c.Held = max(c.Held, held+malformed)
			}
		}
		n := rc.n
		c.Count = n
		if c.Held >= n {
			short := ""
			if rc.proves() && c.Held > n {
				short = r.countShort(ctx, since, until, n, c.Held)
			}
			switch {
			case !rc.proves():
				c.Why = whyCountApprox
			case short != "":
				c.Why = short
			default:
				c.Proof = ProofCount
			}
			return !rc.proves() || short != ""
		}
		if why, ok := r.shortOnlyLive(ctx, since, until); ok {
			c.Why = why
			return false
		}
		if c.Repaged >= maxRepages {
			about := ""
			if !rc.proves() {
				about = "about "
			}
			c.Proof = ProofUnproven
			c.Why = fmt.Sprintf("the relay counts %s%d events, paging %d times yielded %d: it serves fewer than it holds", about, n, c.Repaged+1, c.Held)
			return false
		}
		c.Repaged++
		held, err := r.repageHeld(ctx, since, until, malformed)
		if err == nil {
			c.Held = held
		}
		r.log.Info("range short of COUNT; paged again", zap.Int64("since", since), zap.Int64("until", until),
			zap.Int64("count", n), zap.Int64("held", c.Held), zap.Error(err))
		if err != nil {
			c.Proof, c.Why = ProofUnproven, fmt.Sprintf("paging again: %v", err)
			return false
		}
	}
}

// shortOnlyLive reports whether [since, until], which holds fewer events
// than the relay counts, holds at least as many as it counts outside the
// seconds in which events may have been published while this run crawled
// the relay (from liveMargin before it started to liveMargin after now:
// a busy relay takes in new events all the while, which paging never
// promised). Then the range is proven by COUNT outside those seconds and
// paged inside them, as why says. A range that does not reach them, or
// whose shortfall lies elsewhere, is not (ok false).
func (r *relayCrawl) shortOnlyLive(ctx context.Context, since, until int64) (why string, ok bool) {
	lo := r.started.Add(-liveMargin).Unix()
	hi := r.c.opts.Now().Add(liveMargin).Unix()
	if until < lo || since > hi {
		return "", false
	}
	counted := func(since, until int64) bool { // the archive holds what the relay counts
		if since > until {
			return true
		}
		rc, ok := r.countEvents(ctx, since, until)
		if !ok || !rc.proves() {
			return false
		}
		held, err := r.held(since, until)
		return err == nil && held >= rc.n
	}
	if !counted(since, lo-1) || !counted(hi+1, until) {
		return "", false
	}
	return fmt.Sprintf("counted in full but for [%d, %d], which was paged: the relay took in events dated then while it was crawled, and counts them", max(since, lo), min(until, hi)), true
}

// servedOver checks a COUNT n below what the archive holds of [since,
// until]: the range is paged again, newest first, until its pages hold
// more than n distinct events of it (their number is returned) or it
// ends (0). Held above a true count is common (replaced and deleted
// events stay archived); pages above it are not: the relay's COUNT
// undercounts, and proves nothing (eventstore's CountEvents counts one
// event per query when part of the filter is checked on the event, as
// with --authors; some relays count what a limit-capped query returns).
// At most servedOverPages pages are asked: a larger count is trusted.
func (r *relayCrawl) servedOver(ctx context.Context, since, until, n int64) int {
	if n >= int64(servedOverPages*r.limit) {
		return 0
	}
	ids := map[[32]byte]bool{}
	cursor := until
	for range servedOverPages {
		page, _, err := r.fetch(ctx, r.filter(since, cursor, nil, nil))
		if err != nil || page.End != relayconn.EndEOSE {
			return 0
		}
		oldest, fresh := cursor, 0
		for _, it := range page.Items {
			if it.CreatedAt >= since && it.CreatedAt <= cursor && !ids[it.ID] {
				ids[it.ID] = true
				oldest, fresh = min(oldest, it.CreatedAt), fresh+1
			}
		}
		page.Release()
		switch {
		case int64(len(ids)) > n:
			return len(ids)
		case fresh == 0:
			return 0
		}
		cursor = oldest // inclusive: ids dedup the boundary second
	}
	return 0
}

// repageHeld pages [since, until] again and returns what the archive then
// holds of it, malformed frames included: malformed as the crawl tallied
// them, or as many as the pages carried again if more (a recheck knows
// none but those).
func (r *relayCrawl) repageHeld(ctx context.Context, since, until, malformed int64) (int64, error) {
	seen, err := r.repage(ctx, since, until)
	if err != nil {
		return 0, err
	}
	held, err := r.held(since, until)
	return held + max(malformed, int64(seen)), err
}

// countShort says why a COUNT n below what the archive holds of [since,
// until] proves nothing, or "" if it stands: the relay serves more when
// asked (servedOver, if n is small enough to ask that of), or the archive
// holds a tenth more and the relay was caught serving pages that are not
// what NIP-01 promises (a silently capped COUNT of 700 against 2,929 held
// proved a relay caught three ways drained, 71 of 3,000 lost).
func (r *relayCrawl) countShort(ctx context.Context, since, until, n, held int64) string {
	if n < int64(servedOverPages*r.limit) {
		if served := r.servedOver(ctx, since, until, n); served > 0 {
			r.countCapAt(n)
			return undercounts(n, served)
		}
	}
	// A little more held is common (malformed copies, replaced and
	// deleted events); a tenth more is not. (Paging again shows nothing
	// from a relay that answers pages with nothing: a COUNT capped at 184
	// without saying so proved 2,896 held of such a relay, 104 lost.)
	if r.lies() == "" || held-n <= n/10 {
		return ""
	}
	r.countCapAt(n)
	return fmt.Sprintf("the relay's COUNT (%d) is below what the archive holds of the range (%d), and its pages lie", n, held)
}

// countCapAt records that the relay's COUNT said n where it serves (or the
// archive holds) more: the lowest such n is taken for its cap.
func (r *relayCrawl) countCapAt(n int64) {
	for {
		capAt := r.countCap.Load()
		if (capAt != 0 && capAt <= n) || r.countCap.CompareAndSwap(capAt, n) {
			return
		}
	}
}

// whyCountUnder is why a range of a relay whose pages lie is not proven
// by a COUNT that agrees, once one of its COUNTs was seen under what it
// serves.
const whyCountUnder = "the relay's COUNT was seen under what it serves"

// whyCountCapped is why a range counted at or over the relay's cap
// (countCapAt) is not proven by it.
const whyCountCapped = "the relay's COUNT is at or over the most it was seen to count where it serves more"

// undercounts is why a range whose COUNT n is below the served events of
// it servedOver paged is not proven by it.
func undercounts(n int64, served int) string {
	return fmt.Sprintf("the relay's COUNT (%d) is below what it serves of the range (%d paged again)", n, served)
}

// servedOverPages bounds servedOver's paging.
const servedOverPages = 8

// repage pages [since, until] newest-first again without moving any
// shard's cursor, completing walls on the way (in windows, if the relay
// was caught sending pages that are not a range's newest events); what it
// fetches is stored. It returns how many distinct malformed frames its
// pages carried (the relay's COUNT counts them as events).
func (r *relayCrawl) repage(ctx context.Context, since, until int64) (int, error) {
	cursor := until
	failures, slowdowns, empties := 0, 0, 0
	servedBelow := 0 // as pageState.servedBelow
	var win pageWindow
	bad := map[string]bool{}
	for cursor >= since {
		bottom, windowed := since, r.caught(lieUnordered)
		if windowed {
			bottom = win.bottom(since, r.windowTop(since, cursor))
		}
		page, pc, err := r.fetch(ctx, r.filter(bottom, cursor, nil, nil))
		if err != nil {
			return len(bad), err
		}
		if !r.usable(ctx, pc, page, &failures, &slowdowns, fmt.Sprintf("re-page until=%d", cursor)) {
			if ctx.Err() != nil {
				return len(bad), ctx.Err()
			}
			continue
		}
		failures, slowdowns = 0, 0
		for _, m := range page.Malformed {
			key := m.Key
			if key == nil {
				key = m.Raw
			}
			bad[string(key)] = true
		}
		n, frames, oldest := 0, 0, cursor
		distinct := map[[32]byte]bool{}
		var ats []int64
		for _, it := range page.Items {
			if it.CreatedAt < bottom || it.CreatedAt > cursor {
				continue
			}
			frames++
			if !distinct[it.ID] {
				distinct[it.ID] = true
				n++
				oldest = min(oldest, it.CreatedAt)
				ats = append(ats, it.CreatedAt)
			}
		}
		if n > r.limit {
			oldest = r.overLimitCursor(ats, r.limit, r.reachesLive(cursor, page))
		}
		if _, err := r.c.opts.Store.Ingest(&rawstore.Batch{Relay: r.idx, Events: copies(page.Items), Malformed: r.malformed(pc, page)}); err != nil {
			return len(bad), fmt.Errorf("store: %w", err)
		}
		r.c.opts.OnCommit()
		if n == 0 && servedBelow > 0 {
			r.emptiedAt(since, cursor, servedBelow)
		}
		servedBelow = 0
		switch {
		case windowed:
			next, wall := r.windowStep(&win, since, bottom, cursor, n, r.full(n, frames))
			if wall {
				if err := r.completeWall(ctx, cursor); err != nil {
					return len(bad), err
				}
			}
			if next < bottom {
				r.answered(next+1, cursor, cursor != until, ats)
			}
			cursor = next
		case n == 0 && r.emptiesDoubted() && empties < emptyRetries:
			// Its EOSE may have come before its events, or its answer
			// was cut: ask again.
			empties++
		case n == 0:
			r.answered(since, cursor, cursor != until, nil)
			return len(bad), nil
		case oldest < cursor:
			// Checked for its order as the pager's pages are: what is
			// paged again after the relay was caught sending events after
			// EOSE was paged trusting order checks it may have answered
			// before their events (a check so passed a relay that sorts by
			// id: 2,948 of 3,000 lost).
			if r.caught(lieAfterEOSE) {
				if due, _ := r.orderCheckDue(); due {
					if lo, hi, ok := emptySeconds(ats, oldest, r.orderCheckTop(cursor, page)); ok && r.checkOrder(ctx, emptyRun{lo: lo, hi: hi, oldest: oldest}) {
						continue // caught: paged in windows from the same cursor
					}
				}
			}
			cursor, empties, servedBelow = oldest, 0, countAt(ats, oldest)
		default:
			empties = 0
			if r.secondFull(ctx, n, frames) {
				if err := r.completeWall(ctx, cursor); err != nil {
					return len(bad), err
				}
			}
			cursor--
		}
	}
	return len(bad), nil
}

// emptyRetries is how often a page that came back empty from a relay
// caught answering pages with nothing where it holds events
// (emptiesDoubted) is asked for again.
const emptyRetries = 3

// copies hands items to the store, with the created_at the receive path
// scanned.
func copies(items []relayconn.Item) []rawstore.Copy {
	out := make([]rawstore.Copy, len(items))
	for i, it := range items {
		out[i] = storeCopy(it)
	}
	return out
}

func storeCopy(it relayconn.Item) rawstore.Copy {
	return rawstore.Copy{ID: it.ID, Raw: it.Raw, CreatedAt: it.CreatedAt, Timed: true}
}

// retryWalls runs the walls still incomplete once more, now that the whole
// range is paged: the known-author set then holds every author the relay
// showed anywhere.
func (r *relayCrawl) retryWalls(ctx context.Context) {
	r.mu.Lock()
	var seconds []int64
	for _, w := range r.rec.Walls {
		if !w.Complete {
			seconds = append(seconds, w.Second)
		}
	}
	r.mu.Unlock()
	slices.Sort(seconds)
	for _, s := range seconds {
		if ctx.Err() != nil {
			return
		}
		if err := r.completeWall(ctx, s); err != nil {
			r.log.Info("wall retry failed", zap.Int64("second", s), zap.Error(err))
		}
	}
}

// readBackLimit bounds the damaged ids one crawl asks a relay for again:
// past it the rest is left to `archiver repair`.
const readBackLimit = 100_000

// readBackEarlier reads back the relay's stored events in the parts of
// the job's range this run did not page: what earlier runs paged (the
// shards done when this run started, the part of a resumed shard above
// where this run took it up, and all of a finished open job below the
// part extended to now). This run's pages compared each copy the relay
// served with the stored one, but nothing read those parts, and a body
// damaged since would let the crawl call the relay drained over it. What
// cannot be read back is asked of the relay again by id (a copy it serves
// replaces the damaged one). It returns what is still damaged, for the
// result's detail, or "".
func (r *relayCrawl) readBackEarlier(ctx context.Context) string {
	if r.c.opts.SkipReadBack {
		return ""
	}
	r.mu.Lock()
	top := r.job.meta.Since
	var paged [][2]int64
	for _, s := range r.queue.Shards() {
		top = max(top, s.Until)
		if t := r.tallies[s.ID]; t != nil {
			paged = append(paged, [2]int64{s.Since, t.top})
		}
	}
	todo := unpaged(r.job.meta.Since, top, paged)
	r.mu.Unlock()
	var damaged [][32]byte
	var read, over int64
	for _, g := range todo {
		hi := uint64(math.MaxUint64)
		if g[1] != shard.OpenTop {
			hi = uint64(g[1])
		}
		err := r.c.opts.Store.ReadBack(ctx, r.idx, uint64(max(g[0], 0)), hi, func(_ uint64, id [32]byte, ok bool) error {
			read++
			switch {
			case ok:
			case len(damaged) < readBackLimit:
				damaged = append(damaged, id)
			default:
				over++
			}
			return nil
		})
		if err != nil {
			return fmt.Sprintf("reading back the events of [%d, %s] an earlier run stored: %v", g[0], untilText(g[1]), err)
		}
	}
	if len(damaged) == 0 {
		if read > 0 {
			r.log.Info("read back the ranges earlier runs paged", zap.Int64("events", read))
		}
		return ""
	}
	total := int64(len(damaged)) + over
	r.log.Warn("stored events of the relay cannot be read back; asking the relay for them again",
		zap.Int64("read", read), zap.Int64("damaged", total))
	pc, err := r.conns.acquire(ctx)
	if err != nil {
		return fmt.Sprintf("%d stored events of the relay cannot be read back, and it could not be asked for them again: %v", total, err)
	}
	missing, err := FetchIDs(ctx, pc.c, r.c.opts.Store, r.idx, damaged, r.c.opts.PageTimeout)
	r.conns.release(pc)
	left := int64(len(missing)) + over
	r.log.Info("asked the relay again for damaged events", zap.Int("asked", len(damaged)), zap.Int64("left", left), zap.Error(err))
	if left == 0 {
		return ""
	}
	why := fmt.Sprintf("%d of the relay's stored events cannot be read back, and the relay did not serve them again", left)
	if err != nil {
		why += " (" + err.Error() + ")"
	}
	return why
}

// unpaged is what of [since, until] the ranges in paged leave out, in
// order.
func unpaged(since, until int64, paged [][2]int64) [][2]int64 {
	slices.SortFunc(paged, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var out [][2]int64
	at := since // the first second not yet known paged
	for _, p := range paged {
		if p[0] > at {
			out = append(out, [2]int64{at, min(p[0]-1, until)})
		}
		if p[1] >= until {
			return out
		}
		at = max(at, p[1]+1)
	}
	if at <= until {
		out = append(out, [2]int64{at, until})
	}
	return out
}
