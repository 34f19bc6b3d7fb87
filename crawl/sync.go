package crawl

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/nostr-archiver/archiver/negentropy"
	"github.com/nostr-archiver/archiver/nip11"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/relayconn"
	"go.uber.org/zap"
)

// SyncOptions configure Sync.
type SyncOptions struct {
	Store *rawstore.Store
	Since int64
	Until int64 // -1: no upper bound (future-dated events included)
	Dial  relayconn.DialOptions
	// Idle is how long an answer (NEG-MSG or a page of ids) may take.
	Idle       time.Duration
	HTTPClient *http.Client
	Logger     *zap.Logger
	Now        func() time.Time
	IDsPerReq  int // default 100
	InFlight   int // id REQs outstanding at once, default 8
	// OnlyIfListed skips (as unsupported) a relay whose NIP-11 document
	// does not list 77, without dialing it.
	OnlyIfListed bool
}

// Sync outcomes.
const (
	SyncComplete    = "complete"    // every window reconciled and every needed id fetched
	SyncIncomplete  = "incomplete"  // some window or id could not be had (Detail says which)
	SyncUnsupported = "unsupported" // the relay refuses NIP-77: crawl it over REQ instead
	SyncFailed      = "failed"      // the relay or the store failed
)

// SyncResult is what Sync did for one relay.
type SyncResult struct {
	Relay     string
	Outcome   string
	Detail    string
	Windows   int   // windows reconciled
	Rounds    int   // NEG-MSG round trips
	Have      int   // ids only the archive holds
	Needed    int   // ids only the relay held
	Fetched   int   // of Needed, fetched and stored
	NegBytes  int64 // NIP-77 payload bytes received
	FetchByte int64 // EVENT frame bytes received
	Proofs    []NegProof
}

// window is one [since, until] range to reconcile; tries counts
// `closed:` endings, lost the connections lost on it and its parents
// (each halves the window: 32 reach single seconds from 1970).
type window struct {
	since, until int64
	tries, lost  int
	// reread: the archive's items of the window are read again before
	// it is reconciled (a part of a window whose set was cut: what that
	// reconciliation fetched is in the archive now, and a set that still
	// lacks it must show as cut).
	reread bool
}

// Sync reconciles the archive with relay over NIP-77 for [Since, Until],
// fetches exactly the ids the archive lacks, and records in the relay's
// record which windows are proven complete. A window the relay blocks as
// too big is split (its cap, if named, is remembered to size the first
// window next time); a reconciliation the relay closes for idleness is
// reopened once, then split.
func Sync(ctx context.Context, o SyncOptions, relay string) SyncResult {
	if o.IDsPerReq <= 0 {
		o.IDsPerReq = 100
	}
	if o.InFlight <= 0 {
		o.InFlight = 8
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	log := o.Logger.With(zap.String("relay", relay))
	res := SyncResult{Relay: relay}
	fail := func(outcome string, err error) SyncResult {
		res.Outcome, res.Detail = outcome, err.Error()
		return res
	}
	idx, err := o.Store.RelayIndex(relay)
	if err != nil {
		return fail(SyncFailed, err)
	}
	rec, err := loadRelayRecord(o.Store, idx)
	if err != nil {
		return fail(SyncFailed, err)
	}
	listed := false
	if doc, err := nip11.Fetch(ctx, o.HTTPClient, relay); err == nil {
		listed = doc.Supports(77)
	}
	if o.OnlyIfListed && !listed {
		return fail(SyncUnsupported, errors.New("its NIP-11 document does not list NIP-77"))
	}
	until := o.Until
	if until < 0 {
		until = maxUntil
	}
	items, err := localItems(ctx, o.Store, o.Since, until)
	if err != nil {
		return fail(SyncFailed, err)
	}
	c, err := relayconn.Dial(ctx, relay, o.Dial)
	if err != nil {
		return fail(SyncFailed, err)
	}
	defer func() { c.Close() }()
	b, _ := probeBounds(func(since, until *int64) ([]*relayconn.Item, bool) {
		return itemsOf(c.Req(ctx, (&Options{}).jobFilter(since, until, 1).bytes(), 1, o.Idle))
	}, log)

	todo := firstWindows(o.Since, until, items, rec.NegCap)
	var unproven []string
	for len(todo) > 0 && ctx.Err() == nil {
		w := todo[0]
		todo = todo[1:]
		wItems, err := windowItems(ctx, o.Store, items, w)
		if err != nil {
			return fail(SyncFailed, err)
		}
		at := o.Now().Unix()
		out, err := relayconn.Reconcile(ctx, c, negFilter(b, w.since, w.until), wItems, o.Idle)
		res.Rounds += out.Rounds
		res.NegBytes += int64(out.Bytes)
		var ne *relayconn.NegError
		switch {
		case err == nil:
		case errors.As(err, &ne):
			blocked, limit := ne.Blocked()
			if limit > 0 {
				rec.NegCap = limit
			}
			if ne.Closed() && w.tries == 0 {
				w.tries++
				todo = append([]window{w}, todo...)
				continue
			}
			if !blocked && !ne.Closed() {
				rec.NIP77 = "refused: NEG-ERR " + ne.Reason
				_ = saveRelayRecord(o.Store, idx, &rec) // the outcome below says more
				return fail(SyncUnsupported, fmt.Errorf("%w: NEG-ERR %q%s", relayconn.ErrNegRefused, ne.Reason, listedNote(listed)))
			}
			parts := split(w, items, limit, o.Now().Unix())
			if parts == nil {
				unproven = append(unproven, fmt.Sprintf("[%d, %d]: %s and cannot be split", w.since, w.until, ne.Reason))
				continue
			}
			log.Debug("NIP-77 window split", zap.Int64("since", w.since), zap.Int64("until", w.until), zap.String("reason", ne.Reason))
			todo = append(parts, todo...)
			continue
		case errors.Is(err, relayconn.ErrNegRefused):
			rec.NIP77 = "refused: " + err.Error()
			_ = saveRelayRecord(o.Store, idx, &rec) // the outcome below says more
			return fail(SyncUnsupported, fmt.Errorf("%w%s; crawl it over REQ instead", err, listedNote(listed)))
		case errors.Is(err, relayconn.ErrConnClosed) && w.lost < 32 && ctx.Err() == nil:
			// Most often an answer over our frame cap (a relay without a
			// negentropy frame limit): smaller windows, smaller answers.
			log.Info("connection lost during NIP-77; redialing with smaller windows", zap.Error(err))
			nc, err := relayconn.Dial(ctx, relay, o.Dial)
			if err != nil {
				return fail(SyncFailed, err) // the deferred Close closes the old one
			}
			c.Close()
			c = nc
			w.lost++
			parts := split(w, items, 0, o.Now().Unix())
			for i := range parts {
				parts[i].lost = w.lost
			}
			if parts == nil {
				parts = []window{w}
			}
			todo = append(parts, todo...)
			continue
		default:
			_ = saveRelayRecord(o.Store, idx, &rec) // the outcome below says more
			res.Outcome, res.Detail = SyncFailed, err.Error()
			return res
		}
		res.Windows++
		res.Have += len(out.Have)
		res.Needed += len(out.Need)
		got, err := fetchAll(ctx, c, o.Store, idx, out.Need, o.IDsPerReq, o.InFlight, o.Idle)
		missing := got.missing
		res.FetchByte += got.bytes
		res.Fetched += len(out.Need) - len(missing)
		if err != nil && len(missing) == 0 {
			return fail(SyncFailed, err)
		}
		if len(missing) > 0 {
			why := fmt.Sprintf("[%d, %d]: %d of %d needed ids did not arrive", w.since, w.until, len(missing), len(out.Need))
			if err != nil {
				why += " (" + err.Error() + ")"
			}
			unproven = append(unproven, why)
			continue
		}
		cut, oldest, err := negWindowCut(ctx, c, o.Store, idx, w, wItems, out, got, filterJSON{}, func(since, until int64) []byte {
			top := &until
			if until == maxUntil {
				top = nil
			}
			s, u := b.widen(&since, top)
			return filterJSON{Since: s, Until: u, Limit: negBelowLimit}.bytes()
		}, o.Idle)
		if err != nil {
			return fail(SyncFailed, err)
		}
		if cut != "" {
			// The relay's set was cut at a query limit: about the size
			// it had. Windows that hold fewer events reconcile whole.
			limit := len(wItems) - len(out.Have) + len(out.Need)
			if limit > 0 {
				rec.NegCap = limit // the next sync starts with windows sized to it
			}
			log.Info("NIP-77 set cut short; splitting the window", zap.Int64("since", w.since), zap.Int64("until", w.until),
				zap.Int("set", limit), zap.String("why", cut))
			parts := cutParts(w, wItems, limit, oldest, o.Now().Unix())
			if parts == nil {
				unproven = append(unproven, fmt.Sprintf("[%d, %d]: the relay's NIP-77 set was cut short (%s), a set cut at a query limit, and the window cannot be split", w.since, w.until, cut))
				continue
			}
			todo = append(parts, todo...)
			continue
		}
		p := NegProof{Since: w.since, Until: w.until, At: at}
		if w.until == maxUntil {
			p.Until = -1
		}
		res.Proofs = append(res.Proofs, p)
	}
	rec.NIP77 = "ok"
	rec.NegProofs = mergeProofs(rec.NegProofs, res.Proofs)
	if err := saveRelayRecord(o.Store, idx, &rec); err != nil {
		return fail(SyncFailed, err)
	}
	switch {
	case ctx.Err() != nil:
		return fail(SyncIncomplete, fmt.Errorf("stopped: %w", ctx.Err()))
	case len(unproven) > 0:
		res.Outcome = SyncIncomplete
		res.Detail = fmt.Sprintf("%d windows unproven: %v", len(unproven), unproven[:min(len(unproven), 5)])
	default:
		res.Outcome = SyncComplete
	}
	return res
}

func listedNote(listed bool) string {
	if listed {
		return " (although its NIP-11 document lists NIP-77)"
	}
	return ""
}

// itemsIn is the index range of items with created_at in [since, until].
func itemsIn(items []negentropy.Item, since, until int64) (int, int) {
	lo, _ := slices.BinarySearchFunc(items, uint64(since), func(it negentropy.Item, t uint64) int { return cmpU(it.Timestamp, t) })
	hi := len(items)
	if until < maxUntil {
		hi, _ = slices.BinarySearchFunc(items, uint64(until)+1, func(it negentropy.Item, t uint64) int { return cmpU(it.Timestamp, t) })
	}
	return lo, hi
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// firstWindows covers [since, until] with one window, or, when the relay
// once named a record cap, with windows holding (by the archive's own
// count) at most half of it each.
func firstWindows(since, until int64, items []negentropy.Item, limit int) []window {
	if limit <= 0 || len(items) <= limit/2 {
		return []window{{since: since, until: until}}
	}
	return chunk(since, until, items, max(1, limit/2))
}

// chunk cuts [since, until] at second boundaries into windows of about
// per archived items each.
func chunk(since, until int64, items []negentropy.Item, per int) []window {
	var out []window
	start := since
	for i := per; i < len(items); i += per {
		t := int64(items[i].Timestamp)
		if t <= start {
			continue // a second holding more than per: kept whole
		}
		out = append(out, window{since: start, until: t - 1})
		start = t
	}
	return append(out, window{since: start, until: until})
}

// split divides a blocked window: by the archive's items when a cap is
// known and they are many, otherwise in two halves of time (an unbounded
// window's upper half begins a day from now). A single second cannot be
// split: nil.
func split(w window, items []negentropy.Item, limit int, now int64) []window {
	if w.since >= w.until {
		return nil
	}
	lo, hi := itemsIn(items, w.since, w.until)
	if limit > 0 && hi-lo > limit/2 {
		if parts := chunk(w.since, w.until, items[lo:hi], max(1, limit/2)); len(parts) > 1 {
			return parts
		}
	}
	if w.until == maxUntil && w.since < now+86400 {
		return []window{{since: w.since, until: now + 86400}, {since: now + 86401, until: w.until}}
	}
	mid := w.since + (w.until-w.since)/2
	return []window{{since: w.since, until: mid}, {since: mid + 1, until: w.until}}
}

// cutParts divides a window whose set was cut short: above and up to the
// oldest second the set held, when that is under the window's top (a set
// cut to the window's newest events holds everything above that second,
// so the upper part reconciles whole; the second itself, which the cut
// may have split, goes whole into the lower part, where it is the newest
// and the set takes it first, as paging goes on under a page), else as
// split does with the set's size as the cap. nil: a single second.
//
// Where the archive holds more of the window than the set (a later sync),
// the window is cut into pieces of half the set's size of the archive's
// items instead: taken from the top down, the rest would be read again
// and reconciled again for every set's worth, quadratic in the window.
func cutParts(w window, items []negentropy.Item, set int, oldest, now int64) []window {
	parts := split(w, items, set, now)
	if len(items) <= set && w.since <= oldest && oldest < w.until {
		parts = []window{{since: oldest + 1, until: w.until}, {since: w.since, until: oldest}}
	}
	for i := range parts {
		parts[i].reread = true
	}
	return parts
}

// windowItems is the archive's items of w: its part of items, or read
// again when w.reread.
func windowItems(ctx context.Context, store *rawstore.Store, items []negentropy.Item, w window) ([]negentropy.Item, error) {
	if w.reread {
		return localItems(ctx, store, w.since, w.until)
	}
	lo, hi := itemsIn(items, w.since, w.until)
	return items[lo:hi], nil
}

// covers reports whether p's range lies within q's (Until -1: no bound).
func (q NegProof) covers(p NegProof) bool {
	return q.Since <= p.Since && (q.Until == -1 || (p.Until != -1 && p.Until <= q.Until))
}

// mergeProofs adds fresh proofs (adjacent ones joined, at the earliest
// time), dropping older ones within their ranges, and keeps the newest 64.
func mergeProofs(old, fresh []NegProof) []NegProof {
	slices.SortFunc(fresh, func(a, b NegProof) int { return cmp.Compare(a.Since, b.Since) })
	var joined []NegProof
	for _, p := range fresh {
		if n := len(joined); n > 0 && joined[n-1].Until != -1 && joined[n-1].Until+1 == p.Since {
			joined[n-1].Until, joined[n-1].At = p.Until, min(joined[n-1].At, p.At)
			continue
		}
		joined = append(joined, p)
	}
	fresh = joined
	out := slices.DeleteFunc(old, func(p NegProof) bool {
		return slices.ContainsFunc(fresh, func(f NegProof) bool { return f.covers(p) })
	})
	out = append(out, fresh...)
	if len(out) > 64 {
		out = out[len(out)-64:]
	}
	return out
}

func loadRelayRecord(store *rawstore.Store, idx uint32) (RelayRecord, error) {
	var rec RelayRecord
	rels, err := store.Relays()
	if err != nil {
		return rec, err
	}
	for _, rel := range rels {
		if rel.Index == idx && len(rel.Record) > 0 {
			if err := json.Unmarshal(rel.Record, &rec); err != nil {
				return rec, fmt.Errorf("relay record of %s: %w", store.RelayURL(idx), err)
			}
		}
	}
	return rec, nil
}

func saveRelayRecord(store *rawstore.Store, idx uint32, rec *RelayRecord) error {
	b, err := json.Marshal(rec)
	if err == nil {
		_, err = store.Ingest(&rawstore.Batch{Relay: idx, RelayRecord: b})
	}
	if err != nil {
		return fmt.Errorf("save the relay record of %s: %w", store.RelayURL(idx), err)
	}
	return nil
}

// fetchAll fetches ids, then what did not arrive again in smaller REQs (a
// relay whose max_limit is below perReq serves part of each), until a
// pass brings nothing new or a REQ holds one id.
func fetchAll(ctx context.Context, c *relayconn.Conn, store *rawstore.Store, relay uint32, ids [][32]byte, perReq, inflight int, idle time.Duration) (fetchResult, error) {
	all := fetchResult{oldest: math.MaxInt64}
	for {
		got, err := fetchIDs(ctx, c, store, relay, ids, perReq, inflight, idle)
		all.missing, all.bytes, all.oldest = got.missing, all.bytes+got.bytes, min(all.oldest, got.oldest)
		if err != nil || len(got.missing) == 0 || len(got.missing) == len(ids) || perReq == 1 {
			return all, err
		}
		ids, perReq = got.missing, max(1, perReq/4)
	}
}
