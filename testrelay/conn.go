package testrelay

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lxzan/gws"
)

// conn is one client connection: a reader (gws's ReadLoop calling
// handler) that owns the subscription table, and a writer goroutine that
// answers queued messages in order.
type conn struct {
	r         *Relay
	socket    *gws.Conn
	wire      *wireConn
	ip        string
	challenge string

	jobs     chan job
	stop     chan struct{}
	stopOnce sync.Once

	// Owned by the reader; subs is also read by Add's live delivery,
	// under subsMu.
	authed bool
	negs   map[string]*negState // NIP-77 reconciliations (neg.go)
	authAs string               // the hex pubkey authed as
	subsMu sync.Mutex
	subs   map[string]*sub
	bucket bucket

	// Owned by the writer.
	buf  []byte  // frames waiting for one write
	pos  []int32 // positions of the page being served
	sent int     // EVENT frames sent on this connection
	// workersFree holds, per page worker, when it finishes its current
	// page (Latency model): a REQ is served at max(arrival, earliest
	// free) + Latency.
	workersFree []time.Time
}

// sub is an open subscription; CLOSE (or a REQ reusing its id) cancels it.
// Once its stored events and EOSE are out, events added to the relay that
// match its filters are delivered live.
type sub struct {
	cancelled atomic.Bool
	live      atomic.Bool
	filters   []filter
	subJSON   []byte
}

// job is one unit of the writer's work, in arrival order: a ready frame,
// or a REQ or COUNT to answer.
type job struct {
	frame   []byte
	event   bool   // frame is a live EVENT: it counts toward DropEvery
	sub     *sub   // REQ
	count   bool   // COUNT
	subJSON []byte // the subscription id as a JSON string
	filters []filter
	arrived time.Time // REQ: when the reader queued it
}

const (
	maxSubIDLen = 64
	// flushSize is how many bytes of frames the writer gathers per write:
	// large enough that a 500-event page takes a few syscalls.
	flushSize = 256 << 10
	// keepBuf caps the write buffer kept between pages.
	keepBuf = 4 << 20
)

var (
	errDropped = errors.New("testrelay: connection dropped on purpose")
	errStopped = errors.New("testrelay: connection stopped")
)

func newConn(r *Relay, socket *gws.Conn, wire *wireConn, ip string, depth int) *conn {
	var ch [16]byte
	_, _ = rand.Read(ch[:])
	c := &conn{
		r:         r,
		socket:    socket,
		wire:      wire,
		ip:        ip,
		challenge: hex.EncodeToString(ch[:]),
		jobs:      make(chan job, depth),
		stop:      make(chan struct{}),
		subs:      make(map[string]*sub),
	}
	socket.Session().Store(sessionKey, c)
	return c
}

const sessionKey = "testrelay.conn"

// shutdown ends the connection abruptly; safe to call from anywhere, more
// than once. The reader sees the closed socket and returns; the writer
// sees stop.
func (c *conn) shutdown() {
	c.stopOnce.Do(func() {
		close(c.stop)
		_ = c.wire.Close()
	})
}

// release gives back the reader's share of the relay-wide counts once the
// reader has returned.
func (c *conn) release() {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	c.r.openSubs.Add(-int64(len(c.subs)))
	clear(c.subs)
}

func (c *conn) enqueue(j job) {
	select {
	case c.jobs <- j:
	case <-c.stop:
	}
}

// sendMsg queues a relay message built from JSON values.
func (c *conn) sendMsg(v ...any) {
	b, _ := json.Marshal(v)
	c.enqueue(job{frame: b})
}

func (c *conn) writeLoop() {
	defer c.r.wg.Done()
	defer c.shutdown() // a failed or deliberate end of writing ends the connection
	for {
		select {
		case <-c.stop:
			return
		case j := <-c.jobs:
			if err := c.do(j); err != nil {
				if errors.Is(err, errDropped) {
					c.r.st.drops.Add(1)
				}
				return
			}
		}
	}
}

func (c *conn) do(j job) error {
	switch {
	case j.frame != nil:
		if err := c.write(appendFrame(c.buf[:0], j.frame)); err != nil {
			return err
		}
		if j.event {
			c.sent++
			c.r.st.events.Add(1)
			if o := c.r.options(); o.DropEvery > 0 && c.sent >= o.DropEvery {
				return errDropped
			}
		}
		return nil
	case j.count:
		o := c.r.options()
		n := c.r.store.snap.Load().count(j.filters, o.IgnoreUntil)
		b := fmt.Appendf(nil, `["COUNT",%s,{"count":%d}]`, j.subJSON, n)
		switch {
		case o.CountCap > 0 && n > o.CountCap && o.CountCapSilent:
			b = fmt.Appendf(nil, `["COUNT",%s,{"count":%d}]`, j.subJSON, o.CountCap)
		case o.CountCap > 0 && n > o.CountCap:
			b = fmt.Appendf(nil, `["COUNT",%s,{"count":%d,"approximate":true}]`, j.subJSON, o.CountCap)
		case o.CountApproximate:
			b = fmt.Appendf(nil, `["COUNT",%s,{"count":%d,"approximate":true}]`, j.subJSON, n)
		}
		return c.write(appendFrame(c.buf[:0], b))
	default:
		return c.serve(j)
	}
}

func (c *conn) write(b []byte) error {
	_, err := c.wire.Write(b)
	if cap(b) <= keepBuf {
		c.buf = b[:0]
	} else {
		c.buf = nil
	}
	return err
}

// serve answers one REQ: its EVENT frames newest first, then EOSE.
func (c *conn) serve(j job) error {
	o := c.r.options()
	if err := c.sleepUntil(c.pageReady(j.arrived, o)); err != nil {
		return err
	}
	if j.sub.cancelled.Load() {
		return nil
	}
	// Live from before the snapshot: an event added meanwhile is queued
	// behind this page (maybe twice; clients dedup), never missed.
	j.sub.live.Store(true)
	snap := c.r.store.snap.Load()
	pos := c.pos[:0]
	unordered := o.PageOrder != "" && c.r.servedSeq.Add(1) > o.OrderedPages
	for i := range j.filters {
		if o.RefuseBroad && anyBroad(j.filters) || o.EmptyBounded && anyBounded(j.filters) {
			break
		}
		f := &j.filters[i]
		start := len(pos)
		lim := f.effectiveLimit(o)
		if o.SplitStores > 1 {
			// Every store applies the limit on its own.
			pos = snap.match(pos, f, -1, o.ExtraOutOfRange, o.IgnoreUntil, o.TiesDescending)
			pos = append(pos[:start], splitStores(pos[start:], snap, o.SplitStores, lim)...)
		} else if unordered && f.ids == nil {
			pos = snap.match(pos, f, -1, 0, o.IgnoreUntil, o.TiesDescending)
			pos = append(pos[:start], pickUnordered(pos[start:], snap, o.PageOrder, lim)...)
		} else {
			pos = snap.match(pos, f, lim, o.ExtraOutOfRange, o.IgnoreUntil, o.TiesDescending)
		}
		if o.BrokenEvery > 0 {
			if f.ids != nil {
				pos = slices.DeleteFunc(pos, func(p int32) bool { return o.Broken(snap.items[p].ID) })
			} else {
				pos = append(pos[:start], cutAtBroken(pos[start:], snap, o)...)
			}
		}
	}
	if len(j.filters) > 1 { // union of the filters, each item once
		slices.Sort(pos)
		pos = slices.Compact(pos)
	}
	// Lookups by id are served straight, as relays that lose events from
	// their time-range scans (a broken index) still find them by id.
	if (o.DuplicateEvery > 0 || o.OmitEvery > 0) && !byIDs(j.filters) {
		lim := -1
		if len(j.filters) == 1 {
			lim = j.filters[0].effectiveLimit(o)
		}
		pos = c.r.bend(pos, snap, o, lim)
	}
	c.pos = pos
	if err := c.sleepUntil(c.r.capacity.reserve(time.Now(), len(pos), o.Capacity)); err != nil {
		return err
	}

	buf := c.buf[:0]
	sent := 0
	defer func() { c.r.st.events.Add(int64(sent)) }()
	closeAt := -1
	n := c.r.closedSeq.Add(1)
	eoseFirst := o.EOSEFirstEvery > 0 && n%int64(o.EOSEFirstEvery) < int64(max(o.EOSEFirstRun, 1))
	if eoseFirst {
		c.r.st.pages.Add(1)
		if err := c.write(appendEOSE(buf, j.subJSON)); err != nil {
			return err
		}
		// The events follow once the client has closed the subscription
		// at its EOSE (or after a second): late, as over a network.
		if err := c.waitClosed(j.sub, time.Second); err != nil {
			return err
		}
		if o.EOSEFirstDropped && j.sub.cancelled.Load() {
			return nil
		}
	}
	if o.ClosedEvery > 0 && n%int64(o.ClosedEvery) == 0 {
		closeAt = len(pos) / 2
	}
	if o.FailQueryEvery > 0 && n%int64(o.FailQueryEvery) == 0 {
		pos = pos[:0] // the query failed: the NOTICE goes out first, then EOSE
		notice, _ := json.Marshal([]string{"NOTICE", "error: failed to query"})
		buf = appendFrame(buf, notice)
	}
	for i, p := range pos {
		if i == closeAt {
			return c.closeMidPage(buf, j)
		}
		if eoseFirst && o.EOSEFirstSplit > 0 && i == len(pos)/4 {
			if err := c.write(buf); err != nil {
				return err
			}
			buf = c.buf[:0]
			if err := c.sleepUntil(time.Now().Add(o.EOSEFirstSplit)); err != nil {
				return err
			}
		}
		buf = appendEventFrame(buf, j.subJSON, &snap.items[p])
		sent++
		c.sent++
		if o.DropEvery > 0 && c.sent >= o.DropEvery {
			_ = c.write(buf)
			return errDropped
		}
		if len(buf) >= flushSize {
			if err := c.write(buf); err != nil {
				return err
			}
			buf = c.buf
		}
	}
	if eoseFirst {
		return c.write(buf)
	}
	buf = appendEOSE(buf, j.subJSON)
	// Counted before the EOSE goes out, so that a client that has seen it
	// reads stats that include its page.
	c.r.st.events.Add(int64(sent))
	sent = 0
	c.r.st.pages.Add(1)
	if err := c.write(buf); err != nil {
		c.r.st.pages.Add(-1)
		return err
	}
	return nil
}

// waitClosed waits until s is cancelled (the client's CLOSE) or for at
// most d.
func (c *conn) waitClosed(s *sub, d time.Duration) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(d); !s.cancelled.Load() && time.Now().Before(deadline); {
		select {
		case <-tick.C:
		case <-c.stop:
			return errStopped
		}
	}
	return nil
}

// appendEOSE appends the frame ["EOSE",<sub>] to buf.
func appendEOSE(buf, subJSON []byte) []byte {
	buf = appendFrameHeader(buf, len(`["EOSE",]`)+len(subJSON))
	buf = append(buf, `["EOSE",`...)
	buf = append(buf, subJSON...)
	return append(buf, ']')
}

// closeMidPage ends a page cut by ClosedEvery: what buf holds, then
// CLOSED with Ditto's reason for a query that timed out.
func (c *conn) closeMidPage(buf []byte, j job) error {
	msg, _ := json.Marshal([]any{"CLOSED", json.RawMessage(j.subJSON), "error: the relay could not respond fast enough"})
	buf = appendFrame(buf, msg)
	j.sub.cancelled.Store(true)
	return c.write(buf)
}

// pageReady returns when the page of a REQ that arrived at arrived is
// ready under o's Latency and PageWorkers, and books the worker serving it.
func (c *conn) pageReady(arrived time.Time, o *Options) time.Time {
	if o.Latency <= 0 {
		return time.Time{}
	}
	if len(c.workersFree) != o.PageWorkers {
		c.workersFree = make([]time.Time, o.PageWorkers)
	}
	w := 0
	for i, t := range c.workersFree {
		if t.Before(c.workersFree[w]) {
			w = i
		}
	}
	start := arrived
	if c.workersFree[w].After(start) {
		start = c.workersFree[w]
	}
	c.workersFree[w] = start.Add(o.Latency)
	return c.workersFree[w]
}

// sleepUntil waits for t (no wait if it is past) or the connection's end.
func (c *conn) sleepUntil(t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-c.stop:
		return errStopped
	}
}

// deliver queues items that match a live subscription of c, as a relay
// pushes new events to open subscriptions after EOSE.
func (c *conn) deliver(items []Item) {
	c.subsMu.Lock()
	var live []*sub
	for _, s := range c.subs {
		if s.live.Load() && !s.cancelled.Load() {
			live = append(live, s)
		}
	}
	c.subsMu.Unlock()
	for _, s := range live {
		for i := range items {
			it := &items[i]
			if it.Frame || !s.matchesLive(it) {
				continue
			}
			frame := make([]byte, 0, len(it.Raw)+len(s.subJSON)+12)
			frame = append(frame, `["EVENT",`...)
			frame = append(frame, s.subJSON...)
			frame = append(frame, ',')
			frame = append(frame, it.Raw...)
			c.enqueue(job{frame: append(frame, ']'), event: true})
		}
	}
}

func (s *sub) matchesLive(it *Item) bool {
	for i := range s.filters {
		f := &s.filters[i]
		if (f.since != nil && it.CreatedAt < *f.since) || (f.until != nil && it.CreatedAt > *f.until) {
			continue
		}
		if f.ids != nil && !slices.Contains(f.ids, it.ID) {
			continue
		}
		if f.matchesRest(it) {
			return true
		}
	}
	return false
}

// appendFrameHeader appends the header of an unmasked, final text frame
// (RFC 6455 section 5.2) carrying n payload bytes.
func appendFrameHeader(dst []byte, n int) []byte {
	switch {
	case n < 126:
		return append(dst, 0x81, byte(n))
	case n <= 0xffff:
		return append(dst, 0x81, 126, byte(n>>8), byte(n))
	default:
		return append(dst, 0x81, 127,
			byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32),
			byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

func appendFrame(dst, payload []byte) []byte {
	return append(appendFrameHeader(dst, len(payload)), payload...)
}

// appendEventFrame appends ["EVENT",<sub>,<raw>] as one frame, or a Frame
// item's raw bytes with the subscription id filled in.
func appendEventFrame(dst, subJSON []byte, it *Item) []byte {
	if it.Frame {
		payload := it.Raw
		if bytes.Contains(payload, []byte(SubPlaceholder)) {
			payload = bytes.ReplaceAll(payload, []byte(SubPlaceholder), subJSON[1:len(subJSON)-1])
		}
		return appendFrame(dst, payload)
	}
	dst = appendFrameHeader(dst, len(`["EVENT",,]`)+len(subJSON)+len(it.Raw))
	dst = append(dst, `["EVENT",`...)
	dst = append(dst, subJSON...)
	dst = append(dst, ',')
	dst = append(dst, it.Raw...)
	return append(dst, ']')
}

// handler receives gws events for every connection of a relay.
type handler struct{}

func connOf(socket *gws.Conn) *conn {
	v, _ := socket.Session().Load(sessionKey)
	return v.(*conn)
}

func (handler) OnOpen(socket *gws.Conn) {
	c := connOf(socket)
	o := c.r.options()
	if o.AuthRequired {
		c.sendMsg("AUTH", c.challenge)
	}
	if o.SendLimitsFrame {
		lim := map[string]any{"can_write": false, "can_read": true}
		if o.MaxLimit > 0 {
			lim["max_limit"] = o.MaxLimit
		}
		if o.MaxSubsPerConn > 0 {
			lim["max_subscriptions"] = o.MaxSubsPerConn
		}
		c.sendMsg("LIMITS", lim)
	}
}

func (handler) OnClose(socket *gws.Conn, _ error) { connOf(socket).shutdown() }

func (handler) OnPing(socket *gws.Conn, payload []byte) { _ = socket.WritePong(payload) }

func (handler) OnPong(*gws.Conn, []byte) {}

func (handler) OnMessage(socket *gws.Conn, msg *gws.Message) {
	defer msg.Close()
	c := connOf(socket)
	o := c.r.options()
	if o.MaxMessageLength > 0 && len(msg.Bytes()) > o.MaxMessageLength {
		c.r.st.drops.Add(1)
		c.shutdown()
		return
	}
	c.handle(msg.Bytes(), o)
}

// reason formats a CLOSED reason, with strfry's "ERROR: " prefix if asked.
func reason(o *Options, prefix, text string) string {
	if o.ErrorPrefix {
		return "ERROR: " + prefix + ": " + text
	}
	return prefix + ": " + text
}

// handle applies one client message. It runs on the reader goroutine.
func (c *conn) handle(data []byte, o *Options) {
	var msg []json.RawMessage
	if err := json.Unmarshal(data, &msg); err != nil || len(msg) == 0 {
		c.sendMsg("NOTICE", "ERROR: bad msg: not a JSON array")
		return
	}
	var label string
	if err := json.Unmarshal(msg[0], &label); err != nil {
		c.sendMsg("NOTICE", "ERROR: bad msg: label is not a string")
		return
	}
	switch label {
	case "REQ":
		c.r.st.reqs.Add(1)
		c.onReq(msg[1:], o, false)
	case "COUNT":
		c.r.st.counts.Add(1)
		c.onReq(msg[1:], o, true)
	case "CLOSE":
		c.r.st.closes.Add(1)
		var id string
		if len(msg) < 2 || json.Unmarshal(msg[1], &id) != nil {
			c.sendMsg("NOTICE", "ERROR: bad msg: CLOSE needs a subscription id")
			return
		}
		c.closeSub(id)
	case "AUTH":
		if len(msg) < 2 {
			c.sendMsg("NOTICE", "ERROR: bad msg: AUTH needs an event")
			return
		}
		c.onAuth(msg[1])
	case "EVENT":
		id := ""
		if len(msg) >= 2 {
			var e struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(msg[1], &e)
			id = e.ID
		}
		c.sendMsg("OK", id, false, "blocked: this relay is read-only")
	case "NEG-OPEN", "NEG-MSG", "NEG-CLOSE":
		c.onNeg(label, msg[1:], o)
	default:
		c.sendMsg("NOTICE", "ERROR: unknown cmd: "+label)
	}
}

func (c *conn) closeSub(id string) {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	if s, ok := c.subs[id]; ok {
		s.cancelled.Store(true)
		delete(c.subs, id)
		c.r.openSubs.Add(-1)
	}
}

// onReq admits or refuses a REQ (or COUNT) whose arguments are args:
// the subscription id then the filters. Checks run in this order: the
// subscription id, the filters, AUTH, the rate limit, then for COUNT
// SupportCount and CountNoticeEvery, for REQ the subscription cap and
// NoticeOnlyEvery.
func (c *conn) onReq(args []json.RawMessage, o *Options, count bool) {
	var id string
	if len(args) == 0 || json.Unmarshal(args[0], &id) != nil {
		c.refuse("NOTICE", "ERROR: bad req: missing subscription id")
		return
	}
	if id == "" || len(id) > maxSubIDLen {
		c.refuse("CLOSED", id, reason(o, "invalid", "subscription id must be 1 to 64 characters"))
		return
	}
	filters := make([]filter, 0, len(args)-1)
	for _, raw := range args[1:] {
		f, err := parseFilter(raw)
		if err != nil {
			c.refuse("CLOSED", id, reason(o, "invalid", "bad filter: "+err.Error()))
			return
		}
		f.strictBounds(o.SinceExclusive, o.UntilExclusive)
		if o.RejectLimitZero && f.limit != nil && *f.limit == 0 {
			c.refuse("CLOSED", id, reason(o, "invalid", "limit 0"))
			return
		}
		filters = append(filters, f)
	}
	if o.AuthRequired && !c.authed {
		c.refuse("CLOSED", id, reason(o, "auth-required", "this relay serves authenticated clients only"))
		return
	}
	if o.AuthRequired && o.AuthAllow != nil && !slices.Contains(o.AuthAllow, c.authAs) {
		c.refuse("CLOSED", id, reason(o, "restricted", "this key is not a member of this relay"))
		return
	}
	if !c.r.allow(c, o) {
		c.refuse("CLOSED", id, reason(o, "rate-limited", "slow down"))
		return
	}
	subJSON, _ := json.Marshal(id)
	if count {
		if !o.SupportCount {
			c.refuse("CLOSED", id, "unsupported: COUNT is not supported")
			return
		}
		if n := c.r.countSeq.Add(1); o.CountNoticeEvery > 0 && n%int64(o.CountNoticeEvery) == 0 {
			c.refuse("NOTICE", "ERROR: could not process COUNT, try again")
			return
		}
		c.enqueue(job{count: true, subJSON: subJSON, filters: filters})
		return
	}
	_, replacing := c.subs[id]
	if o.MaxSubsPerConn > 0 && !replacing && len(c.subs) >= o.MaxSubsPerConn {
		c.refuse("NOTICE", "ERROR: too many concurrent REQs")
		return
	}
	if n := c.r.reqSeq.Add(1); o.NoticeOnlyEvery > 0 && n%int64(o.NoticeOnlyEvery) == 0 {
		c.refuse("NOTICE", "ERROR: could not process REQ, try again")
		return
	}
	s := &sub{filters: filters, subJSON: subJSON}
	c.subsMu.Lock()
	if replacing {
		c.subs[id].cancelled.Store(true)
	} else {
		storeMax(&c.r.st.peakSubs, c.r.openSubs.Add(1))
	}
	c.subs[id] = s
	storeMax(&c.r.st.peakSubsPerConn, int64(len(c.subs)))
	c.subsMu.Unlock()
	c.enqueue(job{sub: s, subJSON: subJSON, filters: filters, arrived: time.Now()})
}

func (c *conn) refuse(v ...any) {
	c.r.st.refusals.Add(1)
	c.sendMsg(v...)
}

// byIDs reports whether every filter names ids.
func byIDs(fs []filter) bool {
	for i := range fs {
		if len(fs[i].ids) == 0 {
			return false
		}
	}
	return len(fs) > 0
}

// anyBounded reports whether a filter of fs has a since or an until.
func anyBounded(fs []filter) bool {
	return slices.ContainsFunc(fs, func(f filter) bool { return f.since != nil || f.until != nil })
}

// anyBroad reports whether a filter of fs is what nostr-rs-relay calls a
// scraper: its precision (ids 2, authors, kinds and tags 1 each) under 2.
func anyBroad(fs []filter) bool {
	for i := range fs {
		p := 0
		if len(fs[i].ids) > 0 {
			p += 2
		}
		for _, n := range []int{len(fs[i].authors), len(fs[i].kinds), len(fs[i].tags)} {
			if n > 0 {
				p++
			}
		}
		if p < 2 {
			return true
		}
	}
	return false
}

// bend applies OmitEvery and DuplicateEvery to a page's positions (in
// place), cutting the page at lim frames (negative: no cut) when
// duplicates count toward the clamp.
func (r *Relay) bend(pos []int32, snap *snapshot, o *Options, lim int) []int32 {
	out := make([]int32, 0, len(pos)+len(pos)/max(1, o.DuplicateEvery)+1)
	for _, p := range pos {
		if o.OmitEvery > 0 {
			if o.OmitForever {
				h := fnv.New32a()
				h.Write([]byte(snap.items[p].ID))
				if h.Sum32()%uint32(o.OmitEvery) == 0 {
					continue
				}
			} else if r.omitSeq.Add(1)%int64(o.OmitEvery) == 0 {
				continue
			}
		}
		out = append(out, p)
		if o.DuplicateEvery > 0 && r.dupSeq.Add(1)%int64(o.DuplicateEvery) == 0 {
			out = append(out, p)
		}
	}
	if o.DuplicateInLimit && lim >= 0 && len(out) > lim {
		out = out[:lim]
	}
	return out
}
