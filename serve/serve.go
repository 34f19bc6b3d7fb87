// Package serve answers Nostr clients from the archive as a read-only
// relay: NIP-01 REQ and CLOSE, NIP-45 COUNT, NIP-77 negentropy (the relay
// side) and the NIP-11 document, over WebSockets (gws). Every answer comes
// from a Querier (rawstore.Store), which returns verified events only, so
// an archive can be served while it is written. Client EVENTs are refused.
//
// Each connection has two goroutines: the reader (gws's ReadLoop) parses
// messages and owns the subscription table; the writer answers them in
// arrival order. The queue between them is bounded, and every socket write
// has a deadline: a client that sends faster than it reads, or stops
// reading, is disconnected instead of growing the relay's memory.
package serve

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
	"time"

	"github.com/lxzan/gws"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/filter"
)

// Querier is what the relay reads: rawstore.Store's Query, and QueryIDs
// for NIP-77.
type Querier interface {
	Query(fs []filter.Filter, fn func(e *event.Event, raw []byte) error) error
	QueryIDs(fs []filter.Filter, fn func(createdAt int64, id [32]byte) error) error
}

// Options are the relay's limits; zero fields take the defaults below.
type Options struct {
	Addr             string        // listen address; default 127.0.0.1:7777
	MaxLimit         int           // most events one filter of a REQ returns; default 5000
	MaxSubs          int           // open subscriptions per connection; default 20
	MaxMessageLength int           // largest client message, bytes; default 128 KiB (a NEG-MSG of our sync is up to 100 KB)
	MaxCount         int           // COUNT stops there and says approximate; default 1,000,000
	QueueDepth       int           // client messages waiting for the writer; default 64
	WriteTimeout     time.Duration // per socket write; default 10s
	MaxSyncEvents    int           // largest NIP-77 set, refused with "blocked:" above (strfry's max_sync_events); default 1,000,000
	MaxSyncSessions  int           // open NIP-77 reconciliations per connection, each up to 40 B x MaxSyncEvents; default 2
	// Listener, when set, is served instead of listening on Addr (a
	// caller that binds early to report the error early: the daemon).
	Listener net.Listener
	// ErrorLog, when set, is told why a connection was dropped or a
	// query failed.
	ErrorLog func(error)
}

// DefaultOptions are the limits zero fields of Options take.
func DefaultOptions() Options { return Options{}.withDefaults() }

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:7777"
	}
	def(&o.MaxLimit, 5000)
	def(&o.MaxSubs, 20)
	def(&o.MaxMessageLength, 128<<10)
	def(&o.MaxCount, 1_000_000)
	def(&o.QueueDepth, 64)
	def(&o.MaxSyncEvents, 1_000_000)
	def(&o.MaxSyncSessions, 2)
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	return o
}

// Server is a running read-only relay.
type Server struct {
	q        Querier
	o        Options
	ln       net.Listener
	srv      *http.Server
	upgrader *gws.Upgrader
	info     []byte

	mu     sync.Mutex
	closed bool
	conns  map[*conn]struct{}
	wg     sync.WaitGroup // Serve, and every connection's reader and writer
}

// New starts serving q on o.Addr (or o.Listener).
func New(q Querier, o Options) (*Server, error) {
	o = o.withDefaults()
	ln := o.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", o.Addr); err != nil {
			return nil, fmt.Errorf("serve: listen on %s: %w", o.Addr, err)
		}
	}
	s := &Server{q: q, o: o, ln: ln, conns: make(map[*conn]struct{}), info: infoDoc(&o)}
	s.upgrader = gws.NewUpgrader(handler{}, &gws.ServerOption{
		Recovery:           gws.Recovery,
		ReadMaxPayloadSize: o.MaxMessageLength,
	})
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.srv.Serve(ln) // returns when Close closes the listener
	}()
	return s, nil
}

// URL is the relay's WebSocket URL.
func (s *Server) URL() string { return "ws://" + s.ln.Addr().String() }

// Close stops listening, drops every connection and waits for all of the
// server's goroutines to exit.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	err := s.srv.Close()
	for _, c := range conns {
		c.shutdown()
	}
	s.wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (s *Server) logErr(err error) {
	if s.o.ErrorLog != nil && err != nil {
		s.o.ErrorLog(err)
	}
}

// infoDoc is the NIP-11 document: the limits the server enforces.
func infoDoc(o *Options) []byte {
	doc, _ := json.Marshal(map[string]any{
		"name":           "archiver",
		"description":    "a read-only Nostr archive: verified events only; EVENT is refused",
		"software":       "https://github.com/nostr-archiver/archiver",
		"supported_nips": []int{1, 11, 45, 77},
		"limitation": map[string]any{
			"max_limit":          o.MaxLimit,
			"default_limit":      o.MaxLimit,
			"max_subscriptions":  o.MaxSubs,
			"max_message_length": o.MaxMessageLength,
			"auth_required":      false,
			"restricted_writes":  true,
		},
	})
	return doc
}

func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
		s.upgrade(w, req)
		return
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Access-Control-Allow-Origin", "*")
	if !strings.Contains(req.Header.Get("Accept"), "application/nostr+json") {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "archiver: a read-only Nostr relay; connect with a WebSocket client\n")
		return
	}
	w.Header().Set("Content-Type", "application/nostr+json")
	_, _ = w.Write(s.info)
}

// upgrade runs one connection's reader on this handler's goroutine, which
// net/http no longer tracks once hijacked (the WaitGroup does).
func (s *Server) upgrade(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		http.Error(w, "closing", http.StatusServiceUnavailable)
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	netConn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	wire := &wireConn{Conn: netConn}
	var rd io.Reader = wire
	if n := brw.Reader.Buffered(); n > 0 { // a client that did not wait for the 101
		pending, _ := brw.Reader.Peek(n)
		rd = io.MultiReader(bytes.NewReader(bytes.Clone(pending)), wire)
	}
	socket, err := s.upgrader.UpgradeFromConn(wire, bufio.NewReaderSize(rd, 16<<10), req)
	if err != nil {
		return // gws answered the failed handshake and closed the connection
	}
	c := &conn{
		s:      s,
		socket: socket,
		wire:   wire,
		jobs:   make(chan job, s.o.QueueDepth),
		stop:   make(chan struct{}),
		subs:   make(map[string]*sub),
		negs:   make(map[string]*negSession),
	}
	socket.Session().Store(sessionKey, c)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = wire.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go c.writeLoop()
	socket.ReadLoop()
	c.shutdown()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// wireConn is the connection under gws. Every Write holds mu, so a batch
// of frames the writer hands over in one call and a frame gws writes (a
// pong, a close) never interleave mid-frame.
type wireConn struct {
	net.Conn
	mu sync.Mutex
}

func (w *wireConn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.Conn.Write(p)
}
