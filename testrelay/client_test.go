package testrelay

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lxzan/gws"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// client is a minimal gws client that hands every message to the test.
type client struct {
	t      testing.TB
	conn   *gws.Conn
	msgs   chan []byte
	stop   chan struct{}
	done   chan struct{} // ReadLoop returned
	closed chan struct{} // the relay ended the connection
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

// dialErr connects to a relay; resp is set when the handshake got an HTTP
// answer.
func dialErr(t testing.TB, url string) (*client, *http.Response, error) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "ws://"), wait)
	if err != nil {
		return nil, nil, err
	}
	c := &client{t: t, msgs: make(chan []byte, 1<<14), stop: make(chan struct{}), done: make(chan struct{}), closed: make(chan struct{})}
	conn, resp, err := gws.NewClientFromConn(clientHandler{c: c}, &gws.ClientOption{Addr: url, Recovery: gws.Recovery}, nc)
	if err != nil {
		return nil, resp, err
	}
	c.conn = conn
	go func() {
		defer close(c.done)
		conn.ReadLoop()
	}()
	t.Cleanup(c.Close)
	return c, resp, nil
}

func dial(t testing.TB, url string) *client {
	t.Helper()
	c, _, err := dialErr(t, url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	return c
}

func (c *client) Close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	_ = c.conn.NetConn().Close()
	<-c.done
}

func (c *client) send(v ...any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
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
	return decode(c.t, b)
}

func decode(t testing.TB, b []byte) msg {
	t.Helper()
	var a []json.RawMessage
	if err := json.Unmarshal(b, &a); err != nil || len(a) == 0 {
		t.Fatalf("not a relay message: %q", b)
	}
	m := msg{args: a[1:], raw: b}
	_ = json.Unmarshal(a[0], &m.label)
	return m
}

// expectNone fails if a message arrives within d.
func (c *client) expectNone(d time.Duration) {
	c.t.Helper()
	if b, err := c.next(d); err == nil {
		c.t.Fatalf("unexpected message %s", b)
	}
}

// page is what one REQ brought back.
type page struct {
	events []json.RawMessage // event objects, in arrival order
	end    msg               // EOSE, CLOSED or NOTICE that ended it
}

// req sends a REQ and collects its EVENTs until EOSE, CLOSED or NOTICE.
func (c *client) req(sub string, filters ...map[string]any) page {
	c.t.Helper()
	args := []any{"REQ", sub}
	for _, f := range filters {
		args = append(args, f)
	}
	c.send(args...)
	return c.collect(sub)
}

func (c *client) collect(sub string) page {
	c.t.Helper()
	var p page
	for {
		m := c.nextMsg()
		switch m.label {
		case "EVENT":
			if m.str(0) != sub {
				c.t.Fatalf("EVENT for sub %q, want %q", m.str(0), sub)
			}
			p.events = append(p.events, m.args[1])
		case "EOSE", "CLOSED", "NOTICE":
			p.end = m
			return p
		default:
			c.t.Fatalf("unexpected %s", m.raw)
		}
	}
}
