package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lxzan/gws"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/filter"
)

const (
	sessionKey  = "serve.conn"
	maxSubIDLen = 64
	// flushSize is how many bytes of frames the writer gathers per write:
	// a page of events takes a few syscalls, not one each.
	flushSize = 256 << 10
)

var (
	errCancelled = errors.New("subscription closed")
	errStopped   = errors.New("connection stopped")
	errCountCap  = errors.New("count cap reached")
	errWrite     = errors.New("write") // a failed write, out of a Query callback
)

// conn is one client connection.
type conn struct {
	s        *Server
	socket   *gws.Conn
	wire     *wireConn
	buf      []byte // frames waiting for one write; owned by the writer
	jobs     chan job
	stop     chan struct{}
	stopOnce sync.Once
	// subs is written by the reader; the writer removes a subscription
	// it ends with CLOSED, so it does not hold a slot the client thinks free.
	subsMu sync.Mutex
	subs   map[string]*sub
	negs   map[string]*negSession // NIP-77, guarded by subsMu too
}

// sub is an open subscription. The archive gets no new events while
// served, so after its EOSE it only holds its slot until CLOSE.
type sub struct{ cancelled atomic.Bool }

// job is the writer's work, in arrival order: a ready message, or a REQ
// or COUNT to answer.
type job struct {
	frame   []byte
	sub     *sub // REQ
	count   bool // COUNT
	id      string
	filters []filter.Filter
	neg     *negJob // NEG-OPEN or NEG-MSG
}

func (c *conn) shutdown() {
	c.stopOnce.Do(func() {
		close(c.stop)
		_ = c.wire.Close()
	})
}

// enqueue hands j to the writer. A full queue means the client sends
// faster than it reads its answers: it is dropped rather than buffered.
func (c *conn) enqueue(j job) {
	select {
	case c.jobs <- j:
	case <-c.stop:
	default:
		c.s.logErr(fmt.Errorf("serve: %s: dropped: %d messages waiting for answers", c.socket.RemoteAddr(), cap(c.jobs)))
		c.shutdown()
	}
}

func (c *conn) send(v ...any) {
	b, _ := json.Marshal(v)
	c.enqueue(job{frame: b})
}

func (c *conn) writeLoop() {
	defer c.s.wg.Done()
	defer c.shutdown() // a failed write ends the connection
	for {
		select {
		case <-c.stop:
			return
		case j := <-c.jobs:
			if err := c.do(j); err != nil {
				if !errors.Is(err, errStopped) {
					c.s.logErr(fmt.Errorf("serve: %s: dropped: %w", c.socket.RemoteAddr(), err))
				}
				return
			}
		}
	}
}

// write sends one message, with whatever frames are gathered before it.
func (c *conn) write(msg []byte) error {
	c.buf = appendFrame(c.buf, msg)
	return c.flush()
}

// gather adds a message to the next write, writing once enough is gathered.
func (c *conn) gather(msg []byte) error {
	if c.buf = appendFrame(c.buf, msg); len(c.buf) < flushSize {
		return nil
	}
	return c.flush()
}

func (c *conn) flush() error {
	b := c.buf
	c.buf = c.buf[:0]
	if cap(c.buf) > 2*flushSize {
		c.buf = nil // one huge event: do not keep its buffer
	}
	select {
	case <-c.stop:
		return errStopped
	default:
	}
	// A reader that stopped reading is dropped once the socket buffers
	// fill and this deadline passes.
	if err := c.wire.SetWriteDeadline(time.Now().Add(c.s.o.WriteTimeout)); err != nil {
		return fmt.Errorf("%w: %w", errWrite, err)
	}
	if _, err := c.wire.Write(b); err != nil {
		return fmt.Errorf("%w: %w", errWrite, err)
	}
	return nil
}

// appendFrame appends msg as one unmasked, unfragmented text frame (the
// server side of RFC 6455; no compression is negotiated).
func appendFrame(dst, msg []byte) []byte {
	n := len(msg)
	switch {
	case n < 126:
		dst = append(dst, 0x81, byte(n))
	case n <= 0xffff:
		dst = append(dst, 0x81, 126, byte(n>>8), byte(n))
	default:
		dst = append(dst, 0x81, 127, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32),
			byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(dst, msg...)
}

func (c *conn) do(j job) error {
	switch {
	case j.frame != nil:
		return c.write(j.frame)
	case j.count:
		return c.count(j)
	case j.neg != nil:
		return c.neg(j.id, j.neg)
	default:
		return c.req(j)
	}
}

// req answers a REQ: its events newest first, then EOSE, or CLOSED if the
// query failed (an EOSE would claim the archive had nothing more).
func (c *conn) req(j job) error {
	idJSON, _ := json.Marshal(j.id)
	var frame []byte
	err := c.s.q.Query(j.filters, func(e *event.Event, _ []byte) error {
		if j.sub.cancelled.Load() {
			return errCancelled
		}
		frame = append(append(append(frame[:0], `["EVENT",`...), idJSON...), ',')
		frame = append(event.AppendJSON(frame, e), ']')
		return c.gather(frame)
	})
	switch {
	case errors.Is(err, errCancelled):
		c.buf = c.buf[:0] // the client closed it: not its gathered events either
		return nil
	case errors.Is(err, errWrite), errors.Is(err, errStopped):
		return err
	case err != nil:
		c.s.logErr(fmt.Errorf("serve: REQ %q: %w", j.id, err))
		c.subsMu.Lock()
		if c.subs[j.id] == j.sub {
			delete(c.subs, j.id)
		}
		c.subsMu.Unlock()
		if j.sub.cancelled.Load() {
			c.buf = c.buf[:0]
			return nil
		}
		b, _ := json.Marshal([]any{"CLOSED", j.id, "error: " + err.Error()})
		return c.write(b)
	}
	if j.sub.cancelled.Load() {
		c.buf = c.buf[:0]
		return nil
	}
	return c.write(fmt.Appendf(nil, `["EOSE",%s]`, idJSON))
}

// count answers a NIP-45 COUNT. It stops at MaxCount and says the count
// is approximate, so one COUNT cannot read the whole archive.
func (c *conn) count(j job) error {
	n := 0
	err := c.s.q.Query(j.filters, func(*event.Event, []byte) error {
		if n++; n >= c.s.o.MaxCount {
			return errCountCap
		}
		return nil
	})
	res := map[string]any{"count": n}
	switch {
	case errors.Is(err, errCountCap):
		res["approximate"] = true
	case err != nil:
		c.s.logErr(fmt.Errorf("serve: COUNT %q: %w", j.id, err))
		b, _ := json.Marshal([]any{"CLOSED", j.id, "error: " + err.Error()})
		return c.write(b)
	}
	b, _ := json.Marshal([]any{"COUNT", j.id, res})
	return c.write(b)
}

// handler is the reader side.
type handler struct{ gws.BuiltinEventHandler }

func (handler) OnClose(socket *gws.Conn, _ error) {
	if c, ok := sessionConn(socket); ok {
		c.shutdown()
	}
}

func sessionConn(socket *gws.Conn) (*conn, bool) {
	v, ok := socket.Session().Load(sessionKey)
	if !ok {
		return nil, false
	}
	c, ok := v.(*conn)
	return c, ok
}

func (handler) OnMessage(socket *gws.Conn, msg *gws.Message) {
	defer msg.Close()
	c, ok := sessionConn(socket)
	if !ok {
		return
	}
	c.handle(msg.Bytes())
}

// handle parses one client message. Anything malformed is answered with a
// NOTICE (or CLOSED for a subscription) and the connection stays.
func (c *conn) handle(data []byte) {
	var msg []json.RawMessage
	if err := json.Unmarshal(data, &msg); err != nil || len(msg) == 0 {
		c.send("NOTICE", "invalid: a message is a JSON array")
		return
	}
	var typ string
	if json.Unmarshal(msg[0], &typ) != nil {
		c.send("NOTICE", "invalid: the message type is not a string")
		return
	}
	switch typ {
	case "REQ", "COUNT":
		c.handleQuery(typ, msg)
	case "NEG-OPEN", "NEG-MSG", "NEG-CLOSE":
		c.handleNeg(typ, msg)
	case "CLOSE":
		var id string
		if len(msg) != 2 || json.Unmarshal(msg[1], &id) != nil {
			c.send("NOTICE", "invalid: CLOSE takes a subscription id")
			return
		}
		c.subsMu.Lock()
		if s := c.subs[id]; s != nil {
			s.cancelled.Store(true)
			delete(c.subs, id)
		}
		c.subsMu.Unlock()
	case "EVENT":
		var e struct {
			ID string `json:"id"`
		}
		if len(msg) != 2 || json.Unmarshal(msg[1], &e) != nil {
			c.send("NOTICE", "invalid: EVENT takes an event object")
			return
		}
		c.send("OK", e.ID, false, "blocked: this relay is a read-only archive")
	default:
		c.send("NOTICE", fmt.Sprintf("unsupported: %q messages", typ))
	}
}

func (c *conn) handleQuery(typ string, msg []json.RawMessage) {
	var id string
	if len(msg) < 2 || json.Unmarshal(msg[1], &id) != nil || id == "" || len(id) > maxSubIDLen {
		c.send("NOTICE", fmt.Sprintf("invalid: %s takes a subscription id of 1 to %d characters", typ, maxSubIDLen))
		return
	}
	if len(msg) < 3 {
		c.send("CLOSED", id, "invalid: no filter")
		return
	}
	fs := make([]filter.Filter, 0, len(msg)-2)
	for _, raw := range msg[2:] {
		f, err := filter.ParseOne(raw)
		if err != nil {
			c.send("CLOSED", id, "invalid: "+err.Error())
			return
		}
		if typ == "REQ" && (f.Limit < 0 || f.Limit > c.s.o.MaxLimit) {
			f.Limit = c.s.o.MaxLimit // NIP-11 max_limit: the client pages with until
		}
		fs = append(fs, f)
	}
	if typ == "COUNT" {
		c.enqueue(job{count: true, id: id, filters: fs})
		return
	}
	c.subsMu.Lock()
	if old := c.subs[id]; old != nil {
		old.cancelled.Store(true) // a REQ reusing an id replaces it
	} else if len(c.subs) >= c.s.o.MaxSubs {
		c.subsMu.Unlock()
		c.send("CLOSED", id, "error: too many subscriptions")
		return
	}
	s := &sub{}
	c.subs[id] = s
	c.subsMu.Unlock()
	c.enqueue(job{sub: s, id: id, filters: fs})
}
