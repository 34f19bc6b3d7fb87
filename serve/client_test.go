package serve_test

// The test client is testrelay's (client_test.go there), trimmed: test
// files cannot be imported across packages.

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lxzan/gws"
)

// client is a minimal gws client that hands every message to the test.
type client struct {
	t       testing.TB
	conn    *gws.Conn
	msgs    chan []byte
	stop    chan struct{}
	done    chan struct{} // ReadLoop returned
	closed  chan struct{} // the relay ended the connection
	reading bool
}

type clientHandler struct {
	gws.BuiltinEventHandler
	c *client
}

func (h clientHandler) OnMessage(_ *gws.Conn, m *gws.Message) {
	b := bytes.Clone(m.Bytes())
	_ = m.Close()
	select {
	case h.c.msgs <- b:
	case <-h.c.stop:
	}
}

func (h clientHandler) OnClose(*gws.Conn, error) { close(h.c.closed) }

const wait = 5 * time.Second

// dial connects to url; the client reads only if read is set (a client
// that never reads is how a slow reader is made).
func dial(t testing.TB, url string, read bool) *client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "ws://"), wait)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, msgs: make(chan []byte, 1<<14), stop: make(chan struct{}), done: make(chan struct{}), closed: make(chan struct{})}
	conn, _, err := gws.NewClientFromConn(clientHandler{c: c}, &gws.ClientOption{Addr: url, Recovery: gws.Recovery}, nc)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	c.conn = conn
	if read {
		c.startReading()
	}
	t.Cleanup(c.Close)
	return c
}

func (c *client) startReading() {
	c.reading = true
	go func() {
		defer close(c.done)
		c.conn.ReadLoop()
	}()
}

func (c *client) Close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	_ = c.conn.NetConn().Close()
	if c.reading {
		<-c.done
	}
}

func (c *client) send(v ...any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendRaw(b)
}

func (c *client) sendRaw(b []byte) {
	c.t.Helper()
	if err := c.conn.WriteMessage(gws.OpcodeText, b); err != nil {
		c.t.Fatalf("send %s: %v", b, err)
	}
}

var errTimeout = errors.New("no message")

// next returns the next message, or errTimeout after d, or net.ErrClosed
// once the relay has closed the connection and nothing is left.
func (c *client) next(d time.Duration) ([]byte, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case m := <-c.msgs:
		return m, nil
	case <-c.closed:
		select {
		case m := <-c.msgs:
			return m, nil
		default:
			return nil, net.ErrClosed
		}
	case <-timer.C:
		return nil, errTimeout
	}
}

// msg is a decoded relay message.
type msg struct {
	label string
	args  []json.RawMessage
	raw   []byte
}

func (m msg) str(i int) string {
	var s string
	_ = json.Unmarshal(m.args[i], &s)
	return s
}

func (c *client) nextMsg() msg {
	c.t.Helper()
	b, err := c.next(wait)
	if err != nil {
		c.t.Fatalf("waiting for a message: %v", err)
	}
	var a []json.RawMessage
	if err := json.Unmarshal(b, &a); err != nil || len(a) == 0 {
		c.t.Fatalf("not a relay message: %q", b)
	}
	m := msg{args: a[1:], raw: b}
	_ = json.Unmarshal(a[0], &m.label)
	return m
}

// page is what one REQ brought back.
type page struct {
	ids []string // event ids, in arrival order
	end msg      // EOSE, CLOSED or NOTICE that ended it
}

// req sends a REQ of filters (JSON objects) and collects its EVENTs until
// EOSE, CLOSED or NOTICE.
func (c *client) req(sub string, filters ...string) page {
	c.t.Helper()
	c.sendRaw([]byte(`["REQ",` + mustJSON(sub) + `,` + strings.Join(filters, ",") + `]`))
	var p page
	for {
		m := c.nextMsg()
		switch m.label {
		case "EVENT":
			if m.str(0) != sub {
				c.t.Fatalf("EVENT for sub %q, want %q", m.str(0), sub)
			}
			var e struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(m.args[1], &e); err != nil {
				c.t.Fatal(err)
			}
			p.ids = append(p.ids, e.ID)
		case "EOSE", "CLOSED", "NOTICE":
			p.end = m
			return p
		default:
			c.t.Fatalf("unexpected %s", m.raw)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
