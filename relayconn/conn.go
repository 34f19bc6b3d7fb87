package relayconn

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lxzan/gws"
	"github.com/nostr-archiver/archiver/frame"
)

// ErrTooManyRequests means the relay refused the WebSocket upgrade with
// HTTP 429: a per-IP connection or rate limit.
var ErrTooManyRequests = errors.New("HTTP 429 on connect")

// ErrConnClosed ends every subscription of a connection that went away.
var ErrConnClosed = errors.New("connection closed")

// ErrFrameTooLarge: the relay sent a message over DialOptions.MaxFrame,
// and the connection was closed (WebSocket status 1009).
var ErrFrameTooLarge = errors.New("the relay sent a message over the largest accepted")

// closeMessageTooLarge is the WebSocket close status gws ends a
// connection with when a message is over its ReadMaxPayloadSize.
const closeMessageTooLarge = 1009

// EndKind says how a page ended.
type EndKind uint8

const (
	EndEOSE     EndKind = iota // the relay sent EOSE
	EndClosed                  // the relay sent CLOSED (Page.Reason)
	EndNotice                  // a NOTICE refused the REQ, no EOSE (strfry's sub cap)
	EndTimeout                 // nothing arrived for the idle timeout
	EndConnLost                // the connection dropped mid-page
	EndOverflow                // the relay sent far more than the limit; the prefix is kept
)

func (k EndKind) String() string {
	return [...]string{"eose", "closed", "notice", "timeout", "conn-lost", "overflow"}[k]
}

// Malformed is a frame that does not parse, kept for quarantine (the
// crawl converts it to the store's own type).
type Malformed struct {
	Raw    []byte
	Reason string
	// Key identifies the same bad frame across subscriptions (the frame
	// with its subscription id blanked); nil means Raw itself.
	Key []byte
}

// Item is one EVENT copy as received, keyed by its scanned id.
type Item struct {
	ID        [32]byte
	CreatedAt int64
	Raw       []byte // copied out of the WebSocket buffer; see Page.Release
}

// Page is what one REQ returned.
type Page struct {
	Items     []Item
	Malformed []Malformed
	Bytes     int
	End       EndKind
	Reason    string // CLOSED / NOTICE text
	Count     int64  // COUNT answers
	// CountApproximate: the relay says Count is not exact (see
	// frame.Msg.Approximate).
	CountApproximate bool
	Latency          time.Duration
	// SentAuthed: the REQ went out after the relay had accepted our
	// NIP-42 AUTH, so an auth-required answer is not for want of it.
	SentAuthed bool
	// EOSE: a stream's (Stream) EOSE had arrived before it ended.
	EOSE bool

	arena rawArena // the Items' Raw (see Release); a stream's page has none
}

// Conn is one WebSocket connection to a relay with any number of REQs in
// flight. The gws read loop (owned by the Conn) only scans frames and
// appends to the page of their subscription, so it never blocks on the
// store: what can arrive is bounded by in-flight REQs x limit.
type Conn struct {
	url  string
	ws   *gws.Conn
	done chan struct{} // closed when the read loop has exited

	mu        sync.Mutex
	subs      map[string]*sub
	order     []*sub // REQs in send order, for NOTICE attribution
	nextSub   uint64
	challenge string
	orphans   []Malformed // malformed frames with no subscription
	// late holds EVENT frames of page subscriptions already ended (a
	// relay that sends EOSE before its events, or relays others' late),
	// for TakeLate: up to maxLate of them and MaxLateBytes.
	late      Late
	lateBytes int
	// ended holds how the latest page subscriptions ended, for what
	// comes for them afterwards (see LateInfo.AfterEOSE).
	ended     [endedSubs]endedSub
	endedNext int
	closeErr  error
	unknown   map[string]int // frame labels nobody standardized, e.g. LIMITS
	// held counts the malformed frames (and their bytes) kept for
	// quarantine and not yet taken by a page's caller; past the caps
	// they are only counted (see keepBad).
	held, heldBytes int

	negs map[string]*negSub // NIP-77 reconciliations (see neg.go)

	maxFrame  int          // DialOptions.MaxFrame, for the error of a message over it
	lastFrame atomic.Int64 // unix nanos of the last frame of any kind
	linger    atomic.Int64 // nanos a page waits for late events after its EOSE (SetLinger)
	pingStop  chan struct{}
	pingDone  chan struct{}

	auth connAuth // NIP-42 state (see auth.go)
}

type sub struct {
	stream   bool // a live tail: EOSE does not end it
	eose     bool // a stream's stored events are all out
	id       string
	num      uint64 // the counter in id
	page     Page
	limit    int
	sent     time.Time
	frames   int
	last     atomic.Int64
	finished chan struct{}
	isCount  bool
	// notice is a NOTICE that came while the sub had heard nothing and
	// was pinned on a newer one: an empty EOSE then ends it as failed.
	notice string
}

// DialOptions configure a connection.
type DialOptions struct {
	MaxFrame     int           // largest frame accepted
	DialTimeout  time.Duration // TCP + TLS + upgrade
	PingInterval time.Duration
	TLS          *tls.Config // cloned per dial
	// ReadBuffer is how many bytes a read from the socket asks for (0:
	// gws's 4 KiB, three 1.2 KB events). A connection that pages through
	// a relay's history reads pages back to back: 64 KiB saves most of
	// the read syscalls, which cost as much as scanning the frames.
	ReadBuffer int
	// NetDial opens the TCP connection; nil means a net.Dialer. Tests
	// give a net.Pipe here, so timeouts and backoff run in virtual time
	// (testing/synctest).
	NetDial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Dial connects to a relay. The returned Conn owns a read loop and a ping
// loop; Close stops both and waits for them.
func Dial(ctx context.Context, relay string, o DialOptions) (*Conn, error) {
	u, err := url.Parse(relay)
	if err != nil {
		return nil, err
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"ws": "80", "wss": "443"}[u.Scheme]
	}
	ctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	netDial := o.NetDial
	if netDial == nil {
		netDial = (&net.Dialer{}).DialContext
	}
	nc, err := netDial(ctx, "tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", relay, err)
	}
	// gws's handshake has no context: closing the socket is how a
	// cancelled dial gets its goroutine back.
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	if u.Scheme == "wss" {
		cfg := &tls.Config{}
		if o.TLS != nil {
			cfg = o.TLS.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = host
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("tls %s: %w", relay, err)
		}
		nc = tc
	}
	c := &Conn{
		url: relay, subs: map[string]*sub{}, done: make(chan struct{}),
		pingStop: make(chan struct{}), pingDone: make(chan struct{}), maxFrame: o.MaxFrame,
	}
	ws, resp, err := gws.NewClientFromConn(c, &gws.ClientOption{
		Addr:               relay,
		ReadMaxPayloadSize: o.MaxFrame,
		ReadBufferSize:     o.ReadBuffer,
		HandshakeTimeout:   o.DialTimeout,
		Recovery:           gws.Recovery,
	}, nc)
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusTooManyRequests {
			return nil, fmt.Errorf("upgrade %s: %w", relay, ErrTooManyRequests)
		}
		if resp != nil {
			return nil, fmt.Errorf("upgrade %s: HTTP %d: %w", relay, resp.StatusCode, err)
		}
		return nil, fmt.Errorf("upgrade %s: %w", relay, err)
	}
	_ = nc.SetDeadline(time.Time{}) // gws leaves the handshake deadline set
	c.ws = ws
	c.lastFrame.Store(time.Now().UnixNano())
	go func() {
		defer close(c.done)
		ws.ReadLoop()
	}()
	go c.pingLoop(o.PingInterval)
	return c, nil
}

// pingLoop keeps NAT and proxies from dropping a quiet connection. It
// never judges liveness: a relay streaming a bulk page may answer pings
// late, and that must not end the page (nak's paginator loses half a
// relay that way).
func (c *Conn) pingLoop(every time.Duration) {
	defer close(c.pingDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.pingStop:
			return
		case <-c.done:
			return
		case <-t.C:
			// A fresh deadline: the last REQ's may have passed long ago,
			// and a ping failing on it would close a healthy connection.
			_ = c.ws.NetConn().SetWriteDeadline(time.Now().Add(10 * time.Second))
			_ = c.ws.WritePing(nil)
		}
	}
}

// Close closes the connection and waits for its goroutines.
func (c *Conn) Close() {
	select {
	case <-c.pingStop:
	default:
		close(c.pingStop)
	}
	_ = c.ws.NetConn().SetWriteDeadline(time.Now().Add(time.Second))
	_ = c.ws.WriteClose(1000, nil)
	_ = c.ws.NetConn().Close()
	<-c.done
	<-c.pingDone
}

// URL is the relay's address as dialed.
func (c *Conn) URL() string { return c.url }

// Done is closed when the connection has gone away.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why the connection went away.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeErr
}

// Challenge returns the NIP-42 challenge the relay sent, if any.
func (c *Conn) Challenge() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.challenge
}

// keepLate keeps an event that came at arrived (unix nanos) for a page
// subscription already ended, if it is one of this connection's and the
// bounds allow.
func (c *Conn) keepLate(m frame.Msg, arrived int64) {
	p, n := issuedSub(m.SubID, c.nextSub)
	if p != subPrefixPage[0] {
		return
	}
	afterEOSE := c.owed(n)
	if len(c.late.Items) >= maxLate || c.lateBytes+len(m.Raw) > MaxLateBytes {
		// The relay sent it after its page's EOSE all the same.
		c.late.DroppedAfterEOSE = c.late.DroppedAfterEOSE || afterEOSE
		return
	}
	c.late.Items = append(c.late.Items, Item{ID: m.ID, CreatedAt: m.CreatedAt, Raw: bytes.Clone(m.Raw)})
	c.late.Info = append(c.late.Info, LateInfo{Arrived: time.Unix(0, arrived), AfterEOSE: afterEOSE})
	c.lateBytes += len(m.Raw)
}

// endedSub is how page subscription num ended.
type endedSub struct {
	num uint64
	// owed: it ended at its EOSE holding fewer events than its limit. An
	// event that comes for it afterwards may be one of its own, sent
	// late. One that ended otherwise (it went idle, a NOTICE refused it,
	// its caller gave up on it) had its events on their way; one that
	// held its limit has no more of its own to come.
	owed bool
}

// owed reports whether an event that came late for page subscription n
// may be one of its own, sent after its EOSE (see endedSub): yes unless
// it is known not to be. Caller holds the lock.
func (c *Conn) owed(n uint64) bool {
	for _, e := range c.ended {
		if e.num == n {
			return e.owed
		}
	}
	return true
}

// Late is what came for page subscriptions after they had ended.
type Late struct {
	Items []Item
	Info  []LateInfo // one per item
	// DroppedAfterEOSE: events that came after their page's EOSE were
	// dropped over the bounds (maxLate, MaxLateBytes).
	DroppedAfterEOSE bool
}

// LateInfo says how a late event came.
type LateInfo struct {
	Arrived time.Time // by the local clock
	// AfterEOSE: it came for a page that had ended at its EOSE short of
	// its limit, so it may be one of that page's events, sent after its
	// EOSE; or one the relay took in since (a relay sends new events to a
	// subscription after its EOSE too, until the CLOSE reaches it). An
	// event for a page that ended otherwise (it went idle, a NOTICE
	// refused it, its caller gave up on it) was on its way when it ended;
	// one for a page holding its limit is none of its own. Neither says
	// anything of the relay.
	AfterEOSE bool
}

// TakeLate returns (and forgets) the events that came for page
// subscriptions after they had ended (see keepLate), so the caller can
// store them: they are the relay's events all the same.
func (c *Conn) TakeLate() Late {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.late
	c.late, c.lateBytes = Late{}, 0
	return l
}

// Bounds on the late events a connection holds between two TakeLate
// calls; past them they are dropped (the page they belong to is asked
// for again or proven short by the audit).
const (
	maxLate      = 4096
	MaxLateBytes = 4 << 20
	// endedSubs bounds the page subscriptions remembered as ended (how);
	// late events of one forgotten are taken as its own, sent after its
	// EOSE: the cautious reading.
	endedSubs = 64
)

// TakeOrphans returns (and forgets) malformed frames that named no
// subscription, so the caller can quarantine them with its next batch.
func (c *Conn) TakeOrphans() []Malformed {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.orphans
	c.orphans = nil
	c.releaseBad(o)
	return o
}

// Bounds on what a relay's malformed frames can make a connection hold
// before a page hands them over: a hostile relay streaming garbage is
// held to these, the rest only counted.
const (
	maxHeldBad      = 256
	maxHeldBadBytes = 4 << 20
)

// labelOverCap is the UnknownLabels entry counting the malformed frames
// dropped over maxHeldBad / maxHeldBadBytes.
const labelOverCap = "(malformed frames over the per-connection cap, dropped)"

// keepBad returns whether a malformed frame of n bytes may be kept, and
// counts it as held if so. Caller holds c.mu.
func (c *Conn) keepBad(n int) bool {
	if c.held >= maxHeldBad || c.heldBytes+n > maxHeldBadBytes {
		if c.unknown == nil {
			c.unknown = map[string]int{}
		}
		c.unknown[labelOverCap]++
		return false
	}
	c.held++
	c.heldBytes += n
	return true
}

// releaseBad forgets bad as held: it was handed over. Caller holds c.mu.
func (c *Conn) releaseBad(bad []Malformed) {
	for _, b := range bad {
		c.held--
		c.heldBytes -= len(b.Raw)
	}
}

// UnknownLabels reports frames with labels the scanner does not know, and
// (as labelOverCap) malformed frames dropped over the per-connection cap.
func (c *Conn) UnknownLabels() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.unknown))
	for k, v := range c.unknown {
		out[k] = v
	}
	return out
}

// Req sends one REQ with filter (a JSON object) and collects its page
// until EOSE, CLOSED, a NOTICE refusal, idle timeout or loss of the
// connection. The subscription is CLOSEd before Req returns.
func (c *Conn) Req(ctx context.Context, filter []byte, limit int, idle time.Duration) (*Page, error) {
	return c.request(ctx, "REQ", filter, limit, idle)
}

// Count sends a NIP-45 COUNT with filter and returns the relay's answer.
func (c *Conn) Count(ctx context.Context, filter []byte, idle time.Duration) (*Page, error) {
	return c.request(ctx, "COUNT", filter, 0, idle)
}

func (c *Conn) request(ctx context.Context, verb string, filter []byte, limit int, idle time.Duration) (*Page, error) {
	s := &sub{limit: limit, finished: make(chan struct{}), isCount: verb == "COUNT", sent: time.Now()}
	s.last.Store(s.sent.UnixNano())
	if err := c.register(s, subPrefixPage); err != nil {
		return nil, err
	}

	msg := make([]byte, 0, len(filter)+32)
	msg = append(msg, `["`...)
	msg = append(msg, verb...)
	msg = append(msg, `","`...)
	msg = append(msg, s.id...)
	msg = append(msg, `",`...)
	msg = append(msg, filter...)
	msg = append(msg, ']')
	if err := c.write(msg); err != nil {
		c.finish(s, EndConnLost, err.Error())
		c.forget(s)
		return &s.page, nil
	}
	idleTimer := time.NewTimer(idle)
	defer idleTimer.Stop()
wait:
	for {
		select {
		case <-s.finished:
			break wait
		case <-ctx.Done():
			c.forget(s)
			_ = c.write(closeMsg(s.id))
			return nil, ctx.Err()
		case <-idleTimer.C:
			// Frames since the timer was set moved the deadline on: the
			// page ends idle after its last frame, not at a tick after.
			if left := idle - time.Since(time.Unix(0, s.last.Load())); left > 0 {
				idleTimer.Reset(left)
				continue
			}
			c.finish(s, EndTimeout, "")
			break wait
		}
	}
	closed := false
	if d := time.Duration(c.linger.Load()); d > 0 && s.page.End == EndEOSE && !s.isCount && !c.holdsLimit(s) {
		// CLOSEd at once, as always; what was on its way still comes
		// (the read loop adds it to the page until forget). A page that
		// holds its limit already waits for nothing more.
		_ = c.write(closeMsg(s.id))
		closed = true
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	c.forget(s)
	if s.page.End != EndConnLost && !s.isCount && !closed {
		_ = c.write(closeMsg(s.id))
	}
	s.page.Latency = time.Since(s.sent)
	return &s.page, nil
}

// holdsLimit reports whether s's page holds its limit already (the read
// loop may still be adding to it).
func (c *Conn) holdsLimit(s *sub) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return s.limit > 0 && len(s.page.Items) >= s.limit
}

// SetLinger makes every later page that ends at its EOSE wait d more for
// events of its subscription, and hold those too: a relay that sends
// events after their page's EOSE (TakeLate) then answers whole pages. 0
// turns it off.
func (c *Conn) SetLinger(d time.Duration) { c.linger.Store(int64(d)) }

// Stream sends a REQ that stays open (a live tail) and hands what arrived
// to fn every flush interval, saying whether the relay's EOSE (the end of
// its stored events, which come newest first) has arrived. It returns the ending page (its Items
// already handed over) when the relay closes the subscription, the
// connection goes away, more than maxBuffered events pile up between two
// flushes (EndOverflow: the caller resumes from its high-water mark), fn
// fails, or ctx ends. filters is one or more JSON filter objects,
// comma-separated, as they go into the REQ.
func (c *Conn) Stream(ctx context.Context, filters []byte, flush time.Duration, maxBuffered int,
	fn func(items []Item, malformed []Malformed, eose bool) error) (*Page, error) {
	s := &sub{stream: true, limit: max(1, maxBuffered/overflowFactor), finished: make(chan struct{}), sent: time.Now()}
	if err := c.register(s, subPrefixStream); err != nil {
		return nil, err
	}
	defer c.forget(s)
	if err := c.write(append(append([]byte(`["REQ","`+s.id+`",`), filters...), ']')); err != nil {
		return nil, err
	}
	take := func() error {
		c.mu.Lock()
		items, bad, eose := s.page.Items, s.page.Malformed, s.eose
		s.page.Items, s.page.Malformed = nil, nil
		c.releaseBad(bad)
		c.mu.Unlock()
		if len(items) == 0 && len(bad) == 0 {
			return nil
		}
		return fn(items, bad, eose)
	}
	t := time.NewTicker(flush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = c.write(closeMsg(s.id))
			return nil, errors.Join(ctx.Err(), take())
		case <-s.finished:
			err := take()
			c.mu.Lock()
			s.page.EOSE = s.eose
			c.mu.Unlock()
			return &s.page, err
		case <-t.C:
			if err := take(); err != nil {
				_ = c.write(closeMsg(s.id))
				return nil, err
			}
		}
	}
}

// Subscription ids are a prefix and a counter in base 36.
const (
	subPrefixPage   = "a"
	subPrefixStream = "t"
)

// blankSubID returns frame with its first JSON string that is one of this
// connection's subscription ids (issued: the counter's last value) blanked
// to "", or nil if it has none. It does not parse: the frame is malformed,
// and a relay may have put the id anywhere (`{"EVENT":"a1"}`).
func blankSubID(frame []byte, issued uint64) []byte {
	for i := 0; i < len(frame); i++ {
		if frame[i] != '"' {
			continue
		}
		end := bytes.IndexByte(frame[i+1:], '"')
		if end < 0 {
			return nil
		}
		str := frame[i+1 : i+1+end]
		if p, _ := issuedSub(string(str), issued); p == subPrefixPage[0] || p == subPrefixStream[0] {
			out := make([]byte, 0, len(frame)-len(str))
			out = append(append(out, frame[:i+1]...), frame[i+1+end:]...)
			return out
		}
		i += end + 1 // past the closing quote
	}
	return nil
}

// issuedSub returns the prefix and counter of id if id is a subscription
// id of this connection's (a prefix, then a counter in base 36 from 1 to
// issued), else 0, 0.
func issuedSub(id string, issued uint64) (byte, uint64) {
	if len(id) < 2 {
		return 0, 0
	}
	n, err := strconv.ParseUint(id[1:], 36, 64)
	if err != nil || n < 1 || n > issued {
		return 0, 0
	}
	return id[0], n
}

// register gives s a subscription id (prefix + a counter) and routes the
// connection's frames for it to s, unless the connection is gone.
func (c *Conn) register(s *sub, prefix string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closeErr != nil {
		return c.closeErr
	}
	c.nextSub++
	s.num = c.nextSub
	s.id = prefix + strconv.FormatUint(s.num, 36)
	s.page.SentAuthed = c.auth.authed
	c.subs[s.id] = s
	c.order = append(c.order, s)
	return nil
}

func closeMsg(id string) []byte { return []byte(`["CLOSE","` + id + `"]`) }

func (c *Conn) write(msg []byte) error {
	_ = c.ws.NetConn().SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteMessage(gws.OpcodeText, msg)
}

// finish ends s once; the page is then owned by the Req goroutine.
func (c *Conn) finish(s *sub, end EndKind, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.finishLocked(s, end, reason)
}

// endedAtEOSE reports whether s ended at its relay's EOSE (or COUNT
// answer). Caller holds the lock.
func (s *sub) endedAtEOSE() bool {
	select {
	case <-s.finished:
		return s.page.End == EndEOSE
	default:
		return false // its caller gave up on it
	}
}

func (c *Conn) finishLocked(s *sub, end EndKind, reason string) {
	select {
	case <-s.finished:
		return
	default:
	}
	s.page.End, s.page.Reason = end, reason
	close(s.finished)
}

// forget stops routing frames to s; its page's malformed frames are then
// the caller's, no longer held by the connection.
func (c *Conn) forget(s *sub) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.subs[s.id]; ok {
		c.releaseBad(s.page.Malformed)
		if !s.stream {
			owed := s.endedAtEOSE() && (s.limit <= 0 || len(s.page.Items) < s.limit)
			c.ended[c.endedNext] = endedSub{num: s.num, owed: owed}
			c.endedNext = (c.endedNext + 1) % endedSubs
		}
	}
	delete(c.subs, s.id)
	for i, o := range c.order {
		if o == s {
			c.order = append(c.order[:i], c.order[i+1:]...)
			break
		}
	}
}

// OnOpen implements gws.Event.
func (c *Conn) OnOpen(*gws.Conn) {}

// OnClose implements gws.Event: every page in flight ends as conn-lost.
func (c *Conn) OnClose(_ *gws.Conn, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var code interface{ Uint16() uint16 }
	switch {
	case err == nil:
		err = ErrConnClosed
	case errors.As(err, &code) && code.Uint16() == closeMessageTooLarge:
		err = fmt.Errorf("%w (%d bytes): an event that large is not read; the crawl's --max-frame, the daemon's max_frame_bytes", ErrFrameTooLarge, c.maxFrame)
	}
	c.closeErr = fmt.Errorf("%w: %w", ErrConnClosed, err)
	for _, s := range c.subs {
		c.finishLocked(s, EndConnLost, err.Error())
	}
	for id := range c.negs {
		c.negDeliver(id, negReply{lost: err.Error()})
	}
}

// OnPing implements gws.Event.
func (c *Conn) OnPing(socket *gws.Conn, payload []byte) { _ = socket.WritePong(payload) }

// OnPong implements gws.Event.
func (c *Conn) OnPong(*gws.Conn, []byte) {}

// overflowFactor bounds a page: a relay that ignores limit is cut off at
// this multiple of it, keeping what arrived.
const overflowFactor = 4

// OnMessage implements gws.Event. It runs on the read loop: scan, copy,
// append; nothing here blocks. Only a frame that moves a subscription on
// (an event, its end, a count) refreshes its idle timer: a relay that
// sends nothing but garbage times out as a silent one does.
func (c *Conn) OnMessage(_ *gws.Conn, msg *gws.Message) {
	defer msg.Close()
	now := time.Now().UnixNano()
	c.lastFrame.Store(now)
	data := msg.Bytes()
	m, err := frame.Parse(data)
	c.mu.Lock()
	defer c.mu.Unlock()
	var s *sub
	if m.SubID != "" {
		s = c.subs[m.SubID]
	}
	if s != nil {
		s.frames++
		if err == nil {
			s.last.Store(now)
		}
	}
	switch {
	case err != nil:
		if !c.keepBad(len(data)) {
			return
		}
		// The same bad frame re-sent on another subscription (the next
		// page repeats its boundary second; a retry repeats the page) is
		// the same copy.
		bad := Malformed{Raw: bytes.Clone(data), Reason: "malformed", Key: blankSubID(data, c.nextSub)}
		if s != nil && errors.Is(err, frame.ErrBadEvent) {
			s.page.Malformed = append(s.page.Malformed, bad)
		} else {
			c.orphans = append(c.orphans, bad)
		}
	case m.Label == frame.Event:
		if s == nil {
			c.keepLate(m, now)
			return
		}
		if s.limit > 0 && len(s.page.Items) >= overflowFactor*s.limit {
			c.finishLocked(s, EndOverflow, "relay ignored limit")
			return
		}
		// A stream's items are taken while it runs: they get copies of
		// their own, which a long tail's arena would otherwise pin.
		var raw []byte
		if s.stream {
			raw = bytes.Clone(m.Raw)
		} else {
			raw = s.page.arena.copy(m.Raw)
		}
		s.page.Items = append(s.page.Items, Item{ID: m.ID, CreatedAt: m.CreatedAt, Raw: raw})
		s.page.Bytes += len(data)
	case m.Label == frame.EOSE:
		switch {
		case s == nil:
		case s.stream:
			s.eose = true
		case s.notice != "" && len(s.page.Items) == 0:
			c.finishLocked(s, EndNotice, s.notice) // see the NOTICE case
		default:
			c.finishLocked(s, EndEOSE, "")
		}
	case m.Label == frame.Closed:
		if s != nil {
			c.finishLocked(s, EndClosed, m.Message)
		}
	case m.Label == frame.Count:
		if s != nil {
			s.page.Count, s.page.CountApproximate = m.Count, m.Approximate
			c.finishLocked(s, EndEOSE, "")
		}
	case m.Label == frame.Notice:
		if c.negNotice(m.Message) {
			break
		}
		// A NOTICE names no subscription. strfry refuses a REQ over its
		// cap with only a NOTICE: pin it on the newest REQ that has heard
		// nothing back; the idle timeout catches whatever this misses.
		// The other silent REQs may be the one it meant: khatru writes a
		// failed query's error as a NOTICE and then sends EOSE, and that
		// empty EOSE must not read as an empty range.
		pinned := false
		for i := len(c.order) - 1; i >= 0; i-- {
			if o := c.order[i]; o.frames == 0 {
				if !pinned {
					c.finishLocked(o, EndNotice, m.Message)
					pinned = true
				} else if o.notice == "" {
					o.notice = m.Message
				}
			}
		}
	case m.Label == frame.Auth:
		c.challenge = m.Message
		c.auth.challenged()
	case m.Label == frame.OK:
		c.auth.ok(m)
	case m.Label == frame.Unknown:
		if c.unknown == nil {
			c.unknown = map[string]int{}
		}
		// A relay picks the labels: at most 16 of them, 64 bytes each.
		label := m.Message[:min(len(m.Message), 64)]
		if _, ok := c.unknown[label]; ok || len(c.unknown) < 16 {
			c.unknown[label]++
		}
	case m.Label == frame.NegMsg:
		c.negDeliver(m.SubID, negReply{msg: m.Message})
	case m.Label == frame.NegErr:
		c.negDeliver(m.SubID, negReply{negErr: m.Message})
	}
}
