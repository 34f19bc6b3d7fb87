// Package relayclient is a minimal Nostr relay client for tests: it
// hands every message to the test, which asserts on what arrives. The
// test relay's tests and serve's tests share it.
package relayclient

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
)

// Wait is how long NextMsg waits for a message.
const Wait = 5 * time.Second

// ErrTimeout is Next's error when no message came in time.
var ErrTimeout = errors.New("no message")

// Client is one connection to a relay.
type Client struct {
	t       testing.TB
	conn    *gws.Conn
	msgs    chan []byte
	stop    chan struct{}
	done    chan struct{} // ReadLoop returned
	closed  chan struct{} // the relay ended the connection
	reading bool
}

type handler struct {
	gws.BuiltinEventHandler
	c *Client
}

func (h handler) OnMessage(_ *gws.Conn, m *gws.Message) {
	b := bytes.Clone(m.Bytes())
	_ = m.Close()
	select {
	case h.c.msgs <- b:
	case <-h.c.stop:
	}
}

func (h handler) OnClose(*gws.Conn, error) { close(h.c.closed) }

// DialErr connects to url and starts reading; resp is set when the
// handshake got an HTTP answer. The client is closed when the test ends.
func DialErr(t testing.TB, url string) (*Client, *http.Response, error) {
	t.Helper()
	c, resp, err := connect(t, url)
	if err == nil {
		c.StartReading()
	}
	return c, resp, err
}

// Dial connects to url and starts reading, failing the test if it cannot.
func Dial(t testing.TB, url string) *Client {
	t.Helper()
	c, _, err := DialErr(t, url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	return c
}

// DialSilent connects to url without reading (how a slow reader is made)
// until StartReading.
func DialSilent(t testing.TB, url string) *Client {
	t.Helper()
	c, _, err := connect(t, url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	return c
}

func connect(t testing.TB, url string) (*Client, *http.Response, error) {
	nc, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "ws://"), Wait)
	if err != nil {
		return nil, nil, err
	}
	c := &Client{t: t, msgs: make(chan []byte, 1<<14), stop: make(chan struct{}), done: make(chan struct{}), closed: make(chan struct{})}
	conn, resp, err := gws.NewClientFromConn(handler{c: c}, &gws.ClientOption{Addr: url, Recovery: gws.Recovery}, nc)
	if err != nil {
		return nil, resp, err
	}
	c.conn = conn
	t.Cleanup(c.Close)
	return c, resp, nil
}

// StartReading starts handing the relay's messages to the test.
func (c *Client) StartReading() {
	c.reading = true
	go func() {
		defer close(c.done)
		c.conn.ReadLoop()
	}()
}

// Close drops the connection and waits for the reader.
func (c *Client) Close() {
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

// Send sends v as one JSON array.
func (c *Client) Send(v ...any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	c.SendRaw(b)
}

// SendRaw sends b as one text message.
func (c *Client) SendRaw(b []byte) {
	c.t.Helper()
	if err := c.Write(b); err != nil {
		c.t.Fatalf("send %s: %v", b, err)
	}
}

// Write sends b as one text message and returns the error, for tests of a
// relay that may hang up.
func (c *Client) Write(b []byte) error { return c.conn.WriteMessage(gws.OpcodeText, b) }

// Next returns the next message, or ErrTimeout after d, or net.ErrClosed
// once the relay has closed the connection and nothing is left.
func (c *Client) Next(d time.Duration) ([]byte, error) {
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
		return nil, ErrTimeout
	}
}

// Msg is a decoded relay message.
type Msg struct {
	Label string
	Args  []json.RawMessage
	Raw   []byte
}

// Str is argument i as a string ("" if it is not one).
func (m Msg) Str(i int) string {
	var s string
	_ = json.Unmarshal(m.Args[i], &s)
	return s
}

// NextMsg waits for the next message, failing the test without one.
func (c *Client) NextMsg() Msg {
	c.t.Helper()
	b, err := c.Next(Wait)
	if err != nil {
		c.t.Fatalf("waiting for a message: %v", err)
	}
	return Decode(c.t, b)
}

// Decode decodes a relay message, failing the test if b is not one.
func Decode(t testing.TB, b []byte) Msg {
	t.Helper()
	var a []json.RawMessage
	if err := json.Unmarshal(b, &a); err != nil || len(a) == 0 {
		t.Fatalf("not a relay message: %q", b)
	}
	m := Msg{Args: a[1:], Raw: b}
	_ = json.Unmarshal(a[0], &m.Label)
	return m
}

// ExpectNone fails if a message arrives within d.
func (c *Client) ExpectNone(d time.Duration) {
	c.t.Helper()
	if b, err := c.Next(d); err == nil {
		c.t.Fatalf("unexpected message %s", b)
	}
}

// Page is what one REQ brought back.
type Page struct {
	Events []json.RawMessage // event objects, in arrival order
	End    Msg               // EOSE, CLOSED or NOTICE that ended it
}

// IDs are the page's event ids, in arrival order.
func (p Page) IDs() []string {
	ids := make([]string, len(p.Events))
	for i, e := range p.Events {
		var ev struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(e, &ev)
		ids[i] = ev.ID
	}
	return ids
}

// Req sends a REQ of filters (marshalled to JSON) and collects its
// EVENTs until EOSE, CLOSED or NOTICE.
func (c *Client) Req(sub string, filters ...map[string]any) Page {
	c.t.Helper()
	args := []any{"REQ", sub}
	for _, f := range filters {
		args = append(args, f)
	}
	c.Send(args...)
	return c.Collect(sub)
}

// ReqRaw is Req with filters given as JSON text.
func (c *Client) ReqRaw(sub string, filters ...string) Page {
	c.t.Helper()
	s, _ := json.Marshal(sub)
	c.SendRaw([]byte(`["REQ",` + string(s) + `,` + strings.Join(filters, ",") + `]`))
	return c.Collect(sub)
}

// Collect reads sub's EVENTs until EOSE, CLOSED or NOTICE.
func (c *Client) Collect(sub string) Page {
	c.t.Helper()
	var p Page
	for {
		m := c.NextMsg()
		switch m.Label {
		case "EVENT":
			if m.Str(0) != sub {
				c.t.Fatalf("EVENT for sub %q, want %q", m.Str(0), sub)
			}
			p.Events = append(p.Events, m.Args[1])
		case "EOSE", "CLOSED", "NOTICE":
			p.End = m
			return p
		default:
			c.t.Fatalf("unexpected %s", m.Raw)
		}
	}
}
