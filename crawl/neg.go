package crawl

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/nostr-archiver/archiver/negentropy"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/relayconn"
	"github.com/nostr-archiver/archiver/shard"
	"go.uber.org/zap"
)

// localItems lists the archive's ids with created_at in [since, until]
// in negentropy order (the T index is in that order already), leaving out
// those whose bodies do not read back: told the archive lacks them, the
// relay sends them, and the copy it sends replaces the damaged one. A
// reconciliation never proves a range over a body the archive lost.
func localItems(ctx context.Context, store *rawstore.Store, since, until int64) ([]negentropy.Item, error) {
	var items []negentropy.Item
	err := store.ReadBack(ctx, rawstore.AnyRelay, uint64(max(since, 0)), uint64(until), func(ts uint64, id [32]byte, ok bool) error {
		if ok {
			items = append(items, negentropy.Item{Timestamp: ts, ID: id})
		}
		return nil
	})
	return items, err
}

// FetchIDs asks the relay on c for ids, 100 per REQ {"ids":[...]} with 8
// in flight, then what did not arrive in smaller REQs (a relay whose
// max_limit is under 100 serves part of each); it stores what comes back
// as relay's copies and returns the ids that did not arrive.
func FetchIDs(ctx context.Context, c *relayconn.Conn, store *rawstore.Store, relay uint32, ids [][32]byte, idle time.Duration) ([][32]byte, error) {
	got, err := fetchAll(ctx, c, store, relay, ids, 100, 8, idle)
	return got.missing, err
}

// fetchIDs asks c for ids, perReq per REQ {"ids":[...]} with up to
// inflight REQs outstanding, ingests what comes back, and returns the ids
// that did not arrive.
func fetchIDs(ctx context.Context, c *relayconn.Conn, store *rawstore.Store, relay uint32, ids [][32]byte, perReq, inflight int, idle time.Duration) (got fetchResult, err error) {
	got.oldest = math.MaxInt64
	type result struct {
		asked [][32]byte
		page  *relayconn.Page
		err   error
	}
	batches := make(chan [][32]byte)
	results := make(chan result)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // before Wait: it stops the workers
	workers := min(inflight, (len(ids)+perReq-1)/perReq)
	wg.Add(workers + 1)
	for range workers {
		go func() {
			defer wg.Done()
			for b := range batches {
				f := idsFilter(b)
				p, err := c.Req(ctx, f, len(b), idle)
				select {
				case results <- result{b, p, err}:
				case <-ctx.Done():
				}
			}
		}()
	}
	go func() {
		defer wg.Done()
		defer close(batches)
		for i := 0; i < len(ids); i += perReq {
			select {
			case batches <- ids[i:min(i+perReq, len(ids))]:
			case <-ctx.Done():
				return
			}
		}
	}()
	var firstErr error
	for sent := 0; sent < len(ids); {
		res := <-results
		sent += len(res.asked)
		if res.err != nil {
			firstErr = cmpErr(firstErr, fmt.Errorf("fetch ids from %s: %w", c.URL(), res.err))
			got.missing = append(got.missing, res.asked...)
			continue
		}
		want := make(map[[32]byte]bool, len(res.asked))
		for _, id := range res.asked {
			want[id] = true
		}
		var keep []rawstore.Copy
		for _, it := range res.page.Items {
			if want[it.ID] {
				delete(want, it.ID)
				keep = append(keep, storeCopy(it))
				got.oldest = min(got.oldest, it.CreatedAt)
			}
		}
		got.bytes += int64(res.page.Bytes)
		bad := append(res.page.Malformed, c.TakeOrphans()...)
		if _, err := store.Ingest(&rawstore.Batch{Relay: relay, Events: keep, Malformed: toStore(bad)}); err != nil {
			return got, fmt.Errorf("store ids fetched from %s: %w", c.URL(), err)
		}
		for id := range want {
			got.missing = append(got.missing, id)
		}
	}
	return got, firstErr
}

// fetchResult is what fetchIDs and fetchAll brought.
type fetchResult struct {
	missing [][32]byte // the ids that did not arrive
	bytes   int64      // EVENT frame bytes received
	oldest  int64      // the oldest created_at among those that did; math.MaxInt64 if none
}

func cmpErr(old, new error) error {
	if old != nil {
		return old
	}
	return new
}

func idsFilter(ids [][32]byte) []byte {
	f := make([]byte, 0, 16+len(ids)*67)
	f = append(f, `{"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			f = append(f, ',')
		}
		f = append(f, '"')
		f = hex.AppendEncode(f, id[:])
		f = append(f, '"')
	}
	return append(f, `]}`...)
}

// negFilter is the NEG-OPEN filter of [since, until] (until < 0: none)
// as a relay reading bounds b must be asked for it.
func negFilter(b bounds, since, until int64) []byte {
	var top *int64
	if until >= 0 && until < maxUntil {
		top = &until
	}
	s, u := b.widen(&since, top)
	m := map[string]int64{}
	if s != nil {
		m["since"] = *s
	}
	if u != nil {
		m["until"] = *u
	}
	out, _ := json.Marshal(m)
	return out
}

// maxUntil stands for "no upper bound" in NIP-77 windows: the value of an
// open shard's top, so a shard's range is a window as it is.
const maxUntil = shard.OpenTop

// negCutProbe is how many of the ids a relay's NIP-77 set lacked are
// asked for by id to tell a set cut short from one that is whole.
const negCutProbe = 20

// negCut reports whether the relay's NIP-77 set lacked events it still
// serves over REQ: up to negCutProbe of the ids it said it lacks (have),
// spread over the range, those it served us itself first, are asked for
// by id, narrowed by the set's filter (job: its kinds and authors; the
// archive's items are every event of the range). One served means the
// set was cut short, and a reconciliation with it proves nothing: khatru
// builds the set with QueryEvents, which eventstore's backends cap at
// their MaxLimit (500 by default) when the filter names no limit, so it
// holds a range's newest events only. An honest relay serves none of
// them (they are other relays' events, or ones it deleted or replaced
// since).
func negCut(ctx context.Context, c *relayconn.Conn, store *rawstore.Store, relay uint32, have [][32]byte, job filterJSON, idle time.Duration) (served, asked int, err error) {
	if len(have) == 0 {
		return 0, 0, nil
	}
	// The relays of a bounded sample: have can hold a whole range of
	// other relays' events.
	var own, others [][32]byte
	for _, id := range spread(have, 10*negCutProbe) {
		srcs, err := store.Sources(id)
		if err != nil {
			return 0, 0, err
		}
		if slices.Contains(srcs, relay) {
			own = append(own, id)
		} else {
			others = append(others, id)
		}
	}
	probe := spread(own, negCutProbe)
	probe = append(probe, spread(others, negCutProbe-len(probe))...)
	f := filterJSON{Kinds: job.Kinds, Authors: job.Authors, Limit: len(probe)}
	asking := make(map[[32]byte]bool, len(probe))
	for _, id := range probe {
		f.IDs = append(f.IDs, hex.EncodeToString(id[:]))
		asking[id] = true
	}
	page, err := c.Req(ctx, f.bytes(), len(probe), idle)
	if err != nil {
		return 0, len(probe), err
	}
	defer page.Release()
	if page.End != relayconn.EndEOSE {
		return 0, len(probe), fmt.Errorf("asking %s for %d ids its NIP-77 set lacked: %s %s", c.URL(), len(probe), page.End, page.Reason)
	}
	for _, it := range page.Items {
		if asking[it.ID] {
			delete(asking, it.ID)
			served++
		}
	}
	return served, len(probe), nil
}

// negWindowCut reports why the relay's NIP-77 set for window w was cut
// short ("" if it was whole) and the oldest created_at the set held
// (math.MaxInt64 for an empty set): it lacked events of the archive that
// it serves by id (negCut), or it serves an event under the oldest its
// set held (a set cut to the window's newest events while the archive
// held nothing older, as on a first sync, which negCut cannot see). items
// are the archive's of w, out the reconciliation, got what its needs
// fetched (all of them: an id that did not arrive leaves the set's
// oldest unknown), job the set's filter, and below the filter of a
// negBelowLimit-event REQ for [since, until].
func negWindowCut(ctx context.Context, c *relayconn.Conn, store *rawstore.Store, relay uint32, w window, items []negentropy.Item,
	out relayconn.NegOutcome, got fetchResult, job filterJSON, below func(since, until int64) []byte, idle time.Duration) (why string, oldest int64, err error) {
	lacked := make(map[[32]byte]bool, len(out.Have))
	for _, id := range out.Have {
		lacked[id] = true
	}
	oldest = got.oldest
	for _, it := range items {
		if !lacked[it.ID] {
			oldest = min(oldest, int64(it.Timestamp))
			break // items are in created_at order
		}
	}
	served, asked, err := negCut(ctx, c, store, relay, out.Have, job, idle)
	if err != nil || served > 0 {
		return fmt.Sprintf("it lacks events the relay serves by id (%d of %d asked)", served, asked), oldest, err
	}
	top := min(oldest-1, w.until) // the whole window for an empty set
	if top < w.since {
		return "", oldest, nil
	}
	// A page of a few events, not one: a relay that drops events from its
	// pages (or ends a scan at a dangling index entry, as the badger store
	// does) may send nothing for the newest one. Then once more from half
	// way down.
	for _, u := range []int64{top, w.since + (top-w.since)/2} {
		page, err := c.Req(ctx, below(w.since, u), negBelowLimit, idle)
		if err != nil {
			return "", oldest, err
		}
		for _, it := range page.Items {
			if it.CreatedAt >= w.since && it.CreatedAt <= u {
				page.Release()
				return fmt.Sprintf("the relay serves an event at %d, under the oldest its set held", it.CreatedAt), oldest, nil
			}
		}
		page.Release()
	}
	return "", oldest, nil
}

// negBelowLimit is the page size of negWindowCut's look under a set.
const negBelowLimit = 20

// spread returns at most n of ids, evenly spaced (all if they are fewer).
func spread(ids [][32]byte, n int) [][32]byte {
	if n <= 0 {
		return nil
	}
	if len(ids) <= n {
		return ids
	}
	out := make([][32]byte, n)
	for i := range out {
		out[i] = ids[i*len(ids)/n]
	}
	return out
}

// negWall proves or completes one wall second over NIP-77 (negRange).
func (r *relayCrawl) negWall(ctx context.Context, second int64) (complete bool, fetched int, err error) {
	return r.negRange(ctx, second, second)
}

// negRange proves or completes [since, until] (until shard.OpenTop: no
// upper bound) over NIP-77: it reconciles the archive's ids of the range
// with the relay's, fetches what is missing, and reports whether the
// range is now held in full. A relay whose set proves cut short (negCut)
// is asked again for smaller windows, as Sync does, until each set is
// whole or a window is a single second.
func (r *relayCrawl) negRange(ctx context.Context, since, until int64) (complete bool, fetched int, err error) {
	items, err := localItems(ctx, r.c.opts.Store, since, until)
	if err != nil {
		return false, 0, err
	}
	pc, err := r.conns.acquire(ctx)
	if err != nil {
		return false, 0, err
	}
	defer r.conns.release(pc)
	complete = true
	for todo := []window{{since: since, until: until}}; len(todo) > 0; {
		w := todo[0]
		todo = todo[1:]
		wItems, err := windowItems(ctx, r.c.opts.Store, items, w)
		if err != nil {
			return false, fetched, err
		}
		out, err := relayconn.Reconcile(ctx, pc.c, r.rangeFilter(w.since, w.until, 0).bytes(), wItems, r.c.opts.PageTimeout)
		if err != nil {
			return false, fetched, fmt.Errorf("NIP-77 over [%d, %d] on %s: %w", w.since, w.until, r.url, err)
		}
		got, err := fetchAll(ctx, pc.c, r.c.opts.Store, r.idx, out.Need, 100, 8, r.c.opts.PageTimeout)
		fetched += len(out.Need) - len(got.missing)
		if err != nil {
			return false, fetched, err
		}
		r.log.Info("range reconciled over NIP-77", zap.Int64("since", w.since), zap.Int64("until", w.until), zap.Int("needed", len(out.Need)),
			zap.Int("missing", len(got.missing)), zap.Int("rounds", out.Rounds))
		complete = complete && len(got.missing) == 0
		if len(got.missing) > 0 {
			continue
		}
		cut, oldest, err := negWindowCut(ctx, pc.c, r.c.opts.Store, r.idx, w, wItems, out, got, r.c.opts.jobFilter(nil, nil, 0),
			func(since, until int64) []byte { return r.rangeFilter(since, until, negBelowLimit).bytes() }, r.c.opts.PageTimeout)
		if err != nil {
			return false, fetched, err
		}
		if cut == "" {
			continue
		}
		set := len(wItems) - len(out.Have) + len(out.Need)
		parts := cutParts(w, wItems, set, oldest, r.c.opts.Now().Unix())
		r.log.Info("NIP-77 set cut short; asking for smaller windows", zap.Int64("since", w.since), zap.Int64("until", w.until),
			zap.Int("set", set), zap.String("why", cut))
		if parts == nil {
			r.log.Warn("NIP-77 set cut short over a single second: it proves nothing there", zap.Int64("second", w.since))
			complete = false
			continue
		}
		todo = append(parts, todo...)
	}
	return complete, fetched, nil
}
