package crawl

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nostr-archiver/archiver/negentropy"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/shard"
	"go.uber.org/zap"
)

// NIP-77 (negentropy) over a Conn: NEG-OPEN, NEG-MSG and NEG-CLOSE out,
// NEG-MSG and NEG-ERR routed back by subscription id. The protocol is
// lock-step, one answer per message sent.

const subPrefixNeg = "n"

// negFrameLimit bounds our negentropy messages: hex doubles them, and
// strfry's default frame cap is 128 KiB.
const negFrameLimit = 50_000

// negReply is what came back for one NEG-OPEN or NEG-MSG.
type negReply struct {
	msg    string // NEG-MSG payload (hex)
	negErr string // NEG-ERR reason
	notice string // a NOTICE taken as the refusal of NIP-77
	lost   string // the connection went away
}

type negSub struct {
	id      string
	waiting bool          // a message is out with no answer yet (guarded by Conn.mu)
	replies chan negReply // one per message sent; a flood beyond is dropped
	bytes   int           // payload bytes received (guarded by Conn.mu)
}

// NegError is a relay's NEG-ERR.
type NegError struct{ Reason string }

func (e *NegError) Error() string { return "NEG-ERR " + e.Reason }

// Blocked reports a `blocked:` refusal (the query is too big for the
// relay) and the cap it named, 0 if none.
func (e *NegError) Blocked() (bool, int) {
	r := strings.TrimPrefix(e.Reason, "ERROR: ")
	if !strings.HasPrefix(r, "blocked:") {
		return false, 0
	}
	return true, firstNumber(r)
}

// Closed reports a `closed:` end (the relay dropped an idle reconciliation).
func (e *NegError) Closed() bool {
	return strings.HasPrefix(strings.TrimPrefix(e.Reason, "ERROR: "), "closed:")
}

func firstNumber(s string) int {
	start := strings.IndexAny(s, "0123456789")
	if start < 0 {
		return 0
	}
	end := start
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(s[start:end])
	return n
}

// ErrNegRefused: the relay does not do NIP-77 (a NOTICE refusal, a
// NEG-ERR other than blocked/closed, or no answer at all).
var ErrNegRefused = errors.New("NIP-77 refused")

func (c *Conn) negOpen(filter []byte, first []byte) (*negSub, error) {
	s := &negSub{replies: make(chan negReply, 2), waiting: true}
	c.mu.Lock()
	if c.closeErr != nil {
		c.mu.Unlock()
		return nil, c.closeErr
	}
	c.nextSub++
	s.id = subPrefixNeg + strconv.FormatUint(c.nextSub, 36)
	if c.negs == nil {
		c.negs = map[string]*negSub{}
	}
	c.negs[s.id] = s
	c.mu.Unlock()
	msg := make([]byte, 0, len(filter)+2*len(first)+32)
	msg = append(msg, `["NEG-OPEN","`+s.id+`",`...)
	msg = append(msg, filter...)
	msg = append(msg, `,"`...)
	msg = hex.AppendEncode(msg, first)
	msg = append(msg, `"]`...)
	if err := c.write(msg); err != nil {
		c.negForget(s)
		return nil, fmt.Errorf("NEG-OPEN to %s: %w", c.url, err)
	}
	return s, nil
}

func (c *Conn) negSend(s *negSub, m []byte) error {
	c.mu.Lock()
	s.waiting = true
	c.mu.Unlock()
	msg := make([]byte, 0, 2*len(m)+32)
	msg = append(msg, `["NEG-MSG","`+s.id+`","`...)
	msg = hex.AppendEncode(msg, m)
	msg = append(msg, `"]`...)
	if err := c.write(msg); err != nil {
		return fmt.Errorf("NEG-MSG to %s: %w", c.url, err)
	}
	return nil
}

// negClose ends s on both sides.
func (c *Conn) negClose(s *negSub) {
	c.negForget(s)
	_ = c.write([]byte(`["NEG-CLOSE","` + s.id + `"]`))
}

func (c *Conn) negForget(s *negSub) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.negs, s.id)
}

// negRecv waits for the answer to the last message sent on s, at most
// idle.
func (c *Conn) negRecv(ctx context.Context, s *negSub, idle time.Duration) (negReply, error) {
	t := time.NewTimer(idle)
	defer t.Stop()
	select {
	case r := <-s.replies:
		return r, nil
	case <-ctx.Done():
		return negReply{}, ctx.Err()
	case <-c.done:
		// The read loop may have delivered the answer just before exiting.
		select {
		case r := <-s.replies:
			return r, nil
		default:
		}
		return negReply{lost: "connection closed"}, nil
	case <-t.C:
		return negReply{}, fmt.Errorf("%w: no answer from %s within %v", ErrNegRefused, c.url, idle)
	}
}

// negDeliver hands r to the neg subscription id. Caller holds c.mu.
func (c *Conn) negDeliver(id string, r negReply) {
	s := c.negs[id]
	if s == nil {
		return // late answer of a closed reconciliation
	}
	s.waiting = false
	s.bytes += len(r.msg)
	select {
	case s.replies <- r:
	default:
	}
}

// negNotice takes a NOTICE as the refusal of every reconciliation waiting
// for an answer if it names negentropy (strfry: `ERROR: bad msg:
// negentropy disabled`) or no REQ is waiting that it could be meant for.
// Caller holds c.mu.
func (c *Conn) negNotice(text string) bool {
	lower := strings.ToLower(text)
	named := strings.Contains(lower, "negentropy") || strings.Contains(lower, "neg-")
	if !named {
		for _, o := range c.order {
			if o.frames == 0 {
				return false
			}
		}
	}
	took := false
	for id, s := range c.negs {
		if s.waiting {
			c.negDeliver(id, negReply{notice: text})
			took = true
		}
	}
	return took
}

// negOutcome is one reconciliation's result.
type negOutcome struct {
	need   [][32]byte
	have   int
	rounds int
	bytes  int // hex payload bytes received
}

// reconcileOn reconciles items (the archive's ids, sorted) with the
// relay's events matching filter over c.
func reconcileOn(ctx context.Context, c *Conn, filter []byte, items []negentropy.Item, idle time.Duration) (negOutcome, error) {
	var out negOutcome
	n, err := negentropy.New(items, negFrameLimit)
	if err != nil {
		return out, err
	}
	first, err := n.Initiate()
	if err != nil {
		return out, err
	}
	s, err := c.negOpen(filter, first)
	if err != nil {
		return out, err
	}
	defer c.negClose(s)
	var have [][32]byte
	for {
		r, err := c.negRecv(ctx, s, idle)
		if err != nil {
			return out, err
		}
		out.rounds++
		out.bytes += len(r.msg)
		switch {
		case r.lost != "":
			return out, fmt.Errorf("NIP-77 with %s: %w: %s", c.url, errConnClosed, r.lost)
		case r.notice != "":
			return out, fmt.Errorf("%w by %s: NOTICE %q", ErrNegRefused, c.url, r.notice)
		case r.negErr != "":
			return out, &NegError{Reason: r.negErr}
		}
		raw, err := hex.DecodeString(r.msg)
		if err != nil {
			return out, fmt.Errorf("NIP-77 with %s: NEG-MSG not hex: %w", c.url, err)
		}
		next, err := n.Reconcile(raw, &have, &out.need)
		if err != nil {
			return out, fmt.Errorf("NIP-77 with %s: %w", c.url, err)
		}
		if next == nil {
			out.have = len(have)
			return out, nil
		}
		if err := c.negSend(s, next); err != nil {
			return out, err
		}
	}
}

// localItems lists the archive's ids with created_at in [since, until]
// in negentropy order (the T index is in that order already).
func localItems(store *rawstore.Store, since, until int64) ([]negentropy.Item, error) {
	var items []negentropy.Item
	err := store.IDsInRange(uint64(max(since, 0)), uint64(until), func(ts uint64, id [32]byte) error {
		items = append(items, negentropy.Item{Timestamp: ts, ID: id})
		return nil
	})
	return items, err
}

// fetchIDs asks c for ids, perReq per REQ {"ids":[...]} with up to
// inflight REQs outstanding, ingests what comes back, and returns the ids
// that did not arrive.
func fetchIDs(ctx context.Context, c *Conn, store *rawstore.Store, relay uint32, ids [][32]byte, perReq, inflight int, idle time.Duration) (missing [][32]byte, bytes int64, err error) {
	type result struct {
		asked [][32]byte
		page  *Page
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
			firstErr = cmpErr(firstErr, fmt.Errorf("fetch ids from %s: %w", c.url, res.err))
			missing = append(missing, res.asked...)
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
			}
		}
		bytes += int64(res.page.Bytes)
		bad := append(res.page.Malformed, c.TakeOrphans()...)
		if _, err := store.Ingest(&rawstore.Batch{Relay: relay, Events: keep, Malformed: toStore(bad)}); err != nil {
			return nil, bytes, fmt.Errorf("store ids fetched from %s: %w", c.url, err)
		}
		for id := range want {
			missing = append(missing, id)
		}
	}
	return missing, bytes, firstErr
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

// negFilter is the NEG-OPEN filter of [since, until] (until < 0: none).
func negFilter(since, until int64) []byte {
	m := map[string]int64{"since": since}
	if until >= 0 && until < maxUntil {
		m["until"] = until
	}
	b, _ := json.Marshal(m)
	return b
}

// maxUntil stands for "no upper bound" in NIP-77 windows.
const maxUntil = int64(1<<63 - 1)

// negWall proves or completes one wall second over NIP-77 (negRange).
func (r *relayCrawl) negWall(ctx context.Context, second int64) (complete bool, fetched int, err error) {
	return r.negRange(ctx, second, second)
}

// negRange proves or completes [since, until] (until shard.OpenTop: no
// upper bound) over NIP-77: it reconciles the archive's ids of the range
// with the relay's, fetches what is missing, and reports whether the
// range is now held in full.
func (r *relayCrawl) negRange(ctx context.Context, since, until int64) (complete bool, fetched int, err error) {
	items, err := localItems(r.c.opts.Store, since, until)
	if err != nil {
		return false, 0, err
	}
	pc, err := r.conns.acquire(ctx)
	if err != nil {
		return false, 0, err
	}
	defer r.conns.release(pc)
	top := &until
	if until == shard.OpenTop {
		top = nil
	}
	f := r.jobFilter(&since, top, 0).bytes()
	out, err := reconcileOn(ctx, pc.c, f, items, r.c.opts.PageTimeout)
	if err != nil {
		return false, 0, fmt.Errorf("NIP-77 over [%d, %d] on %s: %w", since, until, r.url, err)
	}
	missing, _, err := fetchAll(ctx, pc.c, r.c.opts.Store, r.idx, out.need, 100, 8, r.c.opts.PageTimeout)
	if err != nil {
		return false, len(out.need) - len(missing), err
	}
	r.log.Info("range reconciled over NIP-77", zap.Int64("since", since), zap.Int64("until", until), zap.Int("needed", len(out.need)),
		zap.Int("missing", len(missing)), zap.Int("rounds", out.rounds))
	return len(missing) == 0, len(out.need) - len(missing), nil
}
