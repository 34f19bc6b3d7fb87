// Package testrelay is a Nostr relay for tests and benchmarks of the
// crawler: NIP-01 reads (REQ, CLOSE; client EVENTs are refused), NIP-11,
// NIP-42 AUTH challenges and NIP-45 COUNT, over real WebSockets on
// 127.0.0.1, with fault injection that reproduces how real relays bend the
// protocol (see Options), and a fixture generator (see Generate) that
// records the truth a test checks the archive against.
//
// Each connection has two goroutines: a reader (gws's ReadLoop) that
// parses client messages and applies refusals, and a writer that answers
// them in arrival order. Subscriptions of one connection are therefore
// served sequentially, each REQ's EVENTs then its EOSE; a CLOSE received
// while a REQ is still queued cancels it. Pages are written as ready-made
// WebSocket frames, many per write, straight from the stored bytes.
package testrelay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lxzan/gws"
)

// Relay is a running test relay. Its methods are safe for concurrent use.
type Relay struct {
	opts   atomic.Pointer[Options]
	optsMu sync.Mutex // serializes SetOptions
	store  *store

	ln       net.Listener
	srv      *http.Server
	upgrader *gws.Upgrader
	url      string

	mu       sync.Mutex
	closed   bool
	conns    map[*conn]struct{}
	perIP    map[string]int
	buckets  map[string]*bucket // per-IP request buckets (RatePerIP)
	capacity pacer              // Options.Capacity across connections
	wg       sync.WaitGroup     // Serve, every connection's reader and writer

	st       counters
	openSubs atomic.Int64
	reqSeq   atomic.Int64
	countSeq atomic.Int64
	// dupSeq and omitSeq count the events DuplicateEvery and OmitEvery
	// pick from.
	dupSeq, omitSeq atomic.Int64
	negSeq          atomic.Int64 // NEG-MSGs, for NegCloseEvery
	closedSeq       atomic.Int64 // REQ pages, for ClosedEvery and FailQueryEvery
	servedSeq       atomic.Int64 // REQs served, for OrderedPages
}

// Stats are the relay's counters since New.
type Stats struct {
	Conns        int64 // WebSocket connections accepted
	OpenConns    int64 // WebSocket connections open now
	ConnsRefused int64 // upgrades refused with HTTP 429 (MaxConnsPerIP)
	REQs         int64 // REQ messages received
	COUNTs       int64 // COUNT messages received
	CLOSEs       int64 // CLOSE messages received
	Pages        int64 // REQs answered through to their EOSE
	Events       int64 // EVENT frames sent
	// Refusals counts REQ and COUNT messages answered with a CLOSED or a
	// NOTICE instead of results (auth, rate limit, subscription cap,
	// NoticeOnlyEvery, unsupported COUNT, bad filters).
	Refusals        int64
	PeakSubsPerConn int64 // most subscriptions open at once on one connection
	PeakSubs        int64 // most subscriptions open at once on the relay
	Drops           int64 // connections dropped on purpose (DropEvery, MaxMessageLength)
	AuthOK          int64 // AUTH events accepted
	AuthFailed      int64 // AUTH events rejected
	BytesSent       int64 // bytes written to clients' sockets (WebSocket framing included)
}

type counters struct {
	conns, openConns, connsRefused                     atomic.Int64
	reqs, counts, closes, pages, events, refusals      atomic.Int64
	peakSubsPerConn, peakSubs, drops, authOK, authFail atomic.Int64
	bytesSent                                          atomic.Int64
}

// New starts a relay listening on opts.Addr.
func New(opts Options) (*Relay, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("testrelay: listen: %w", err)
	}
	r := &Relay{
		store:   newStore(),
		ln:      ln,
		url:     "ws://" + ln.Addr().String(),
		conns:   make(map[*conn]struct{}),
		perIP:   make(map[string]int),
		buckets: make(map[string]*bucket),
	}
	r.opts.Store(&opts)
	r.upgrader = gws.NewUpgrader(handler{}, &gws.ServerOption{
		Recovery: gws.Recovery,
	})
	r.srv = &http.Server{
		Handler:           httpHandler{r},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		_ = r.srv.Serve(ln) // returns when Close closes the listener
	}()
	return r, nil
}

// URL returns the relay's WebSocket URL, ws://127.0.0.1:port.
func (r *Relay) URL() string { return r.url }

// Add stores items; it may be called before or while serving. Each call
// merges into a new snapshot in O(stored+added), so add in batches. Items
// matching an open subscription that has had its EOSE are also pushed to
// it live, as a relay does with newly published events.
func (r *Relay) Add(items ...Item) {
	r.store.add(items)
	r.mu.Lock()
	conns := make([]*conn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	for _, c := range conns {
		c.deliver(items)
	}
}

// Len returns the number of stored items.
func (r *Relay) Len() int { return len(r.store.snap.Load().items) }

// Options returns the options in force, defaults applied.
func (r *Relay) Options() Options { return *r.opts.Load() }

// SetOptions applies change to a copy of the options in force and, if the
// result is valid, makes it take effect for the next request on every
// connection. Addr and QueueDepth cannot change.
func (r *Relay) SetOptions(change func(*Options)) error {
	r.optsMu.Lock()
	defer r.optsMu.Unlock()
	old := r.opts.Load()
	o := *old
	change(&o)
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Addr != old.Addr || o.QueueDepth != old.QueueDepth {
		return fmt.Errorf("%w: Addr and QueueDepth are fixed at New", ErrInvalidOptions)
	}
	r.opts.Store(&o)
	return nil
}

func (r *Relay) options() *Options { return r.opts.Load() }

// Stats returns a snapshot of the counters.
func (r *Relay) Stats() Stats {
	s := &r.st
	return Stats{
		Conns: s.conns.Load(), OpenConns: s.openConns.Load(), ConnsRefused: s.connsRefused.Load(),
		REQs: s.reqs.Load(), COUNTs: s.counts.Load(), CLOSEs: s.closes.Load(),
		Pages: s.pages.Load(), Events: s.events.Load(), Refusals: s.refusals.Load(),
		PeakSubsPerConn: s.peakSubsPerConn.Load(), PeakSubs: s.peakSubs.Load(),
		Drops: s.drops.Load(), AuthOK: s.authOK.Load(), AuthFailed: s.authFail.Load(),
		BytesSent: s.bytesSent.Load(),
	}
}

// Close stops listening, drops every connection and waits for all of the
// relay's goroutines to exit.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.wg.Wait()
		return nil
	}
	r.closed = true
	conns := make([]*conn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()

	err := r.srv.Close()
	for _, c := range conns {
		c.shutdown()
	}
	r.wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

type httpHandler struct{ r *Relay }

func (h httpHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
		h.r.upgrade(w, req)
		return
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if !strings.Contains(req.Header.Get("Accept"), "application/nostr+json") {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "testrelay: a Nostr relay for tests; connect with a WebSocket client\n")
		return
	}
	o := h.r.options()
	if o.NoInfo {
		http.NotFound(w, req)
		return
	}
	doc := o.Info
	if doc == nil {
		doc = infoDoc(o)
	}
	w.Header().Set("Content-Type", "application/nostr+json")
	w.Header().Set("Access-Control-Allow-Origin", "*")
	_, _ = w.Write(doc)
}

// infoDoc is the NIP-11 document that tells the truth about o.
func infoDoc(o *Options) []byte {
	lim := map[string]any{
		"auth_required":     o.AuthRequired,
		"restricted_writes": true,
	}
	if o.MaxLimit > 0 {
		lim["max_limit"] = o.MaxLimit
	}
	if o.DefaultLimit > 0 {
		lim["default_limit"] = o.DefaultLimit
	}
	if o.MaxSubsPerConn > 0 {
		lim["max_subscriptions"] = o.MaxSubsPerConn
	}
	if o.MaxMessageLength > 0 {
		lim["max_message_length"] = o.MaxMessageLength
	}
	nips := []int{1, 11}
	if o.AuthRequired {
		nips = append(nips, 42)
	}
	if o.SupportCount {
		nips = append(nips, 45)
	}
	if o.NIP77 || o.ListNIP77 {
		nips = append(nips, 77)
	}
	doc, _ := json.Marshal(map[string]any{
		"name":           "testrelay",
		"description":    "a Nostr relay for tests and benchmarks",
		"software":       "https://github.com/nostr-archiver/archiver/testrelay",
		"version":        "1",
		"supported_nips": nips,
		"limitation":     lim,
	})
	return doc
}

// upgrade admits a WebSocket connection and runs its reader on this
// handler's goroutine (which net/http no longer tracks once hijacked, so
// the relay's WaitGroup does).
func (r *Relay) upgrade(w http.ResponseWriter, req *http.Request) {
	ip, _, _ := net.SplitHostPort(req.RemoteAddr)
	o := r.options()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		http.Error(w, "relay closing", http.StatusServiceUnavailable)
		return
	}
	if o.MaxConnsPerIP > 0 && r.perIP[ip] >= o.MaxConnsPerIP {
		r.mu.Unlock()
		r.st.connsRefused.Add(1)
		http.Error(w, "too many connections from your IP", http.StatusTooManyRequests)
		return
	}
	r.perIP[ip]++
	r.wg.Add(1)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		if r.perIP[ip]--; r.perIP[ip] == 0 {
			delete(r.perIP, ip)
		}
		r.mu.Unlock()
		r.wg.Done()
	}()

	netConn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	wire := &wireConn{Conn: netConn, sent: &r.st.bytesSent}
	var rd io.Reader = wire
	if n := brw.Reader.Buffered(); n > 0 { // a client that did not wait for the 101
		pending, _ := brw.Reader.Peek(n)
		rd = io.MultiReader(bytes.NewReader(bytes.Clone(pending)), wire)
	}
	socket, err := r.upgrader.UpgradeFromConn(wire, bufio.NewReaderSize(rd, 16<<10), req)
	if err != nil {
		return // gws answered 400 and closed the connection
	}
	c := newConn(r, socket, wire, ip, o.QueueDepth)

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		_ = wire.Close()
		return
	}
	r.conns[c] = struct{}{}
	r.wg.Add(1)
	r.mu.Unlock()
	r.st.conns.Add(1)
	r.st.openConns.Add(1)

	go c.writeLoop()
	socket.ReadLoop()
	c.shutdown()
	c.release()

	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	r.st.openConns.Add(-1)
}

// wireConn is the connection under gws. Every Write holds mu, so a page
// of frames the writer hands over in one call and a frame gws writes (a
// pong, a close) never interleave mid-frame.
type wireConn struct {
	net.Conn
	mu   sync.Mutex
	sent *atomic.Int64 // the relay's BytesSent; nil in unit tests
}

func (w *wireConn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.Conn.Write(p)
	if w.sent != nil {
		w.sent.Add(int64(n))
	}
	return n, err
}

// pacer spreads the relay's Capacity over time: each page reserves its
// events and is served when the reservations before it have drained.
type pacer struct {
	mu   sync.Mutex
	next time.Time // when the budget is free again
}

// reserve books n events at rate events/s and returns when they are
// ready to send: once the relay has produced them after what was booked
// before (zero time when rate is 0: no cap).
func (p *pacer) reserve(now time.Time, n int, rate float64) time.Time {
	if rate <= 0 || n == 0 {
		return time.Time{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	at := p.next
	if at.Before(now) {
		at = now
	}
	p.next = at.Add(time.Duration(float64(n) / rate * float64(time.Second)))
	return p.next
}

// bucket is a token bucket; its owner serializes access.
type bucket struct {
	tokens float64
	last   time.Time
}

func (b *bucket) take(now time.Time, rate float64, burst int) bool {
	if b.last.IsZero() {
		b.tokens = float64(burst)
	} else {
		b.tokens = min(float64(burst), b.tokens+now.Sub(b.last).Seconds()*rate)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// allow takes a request token for c under o's rate limit.
func (r *Relay) allow(c *conn, o *Options) bool {
	if o.RateLimit <= 0 {
		return true
	}
	now := time.Now()
	if !o.RatePerIP {
		return c.bucket.take(now, o.RateLimit, o.RateBurst)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.buckets[c.ip]
	if b == nil {
		b = &bucket{}
		r.buckets[c.ip] = b
	}
	return b.take(now, o.RateLimit, o.RateBurst)
}
