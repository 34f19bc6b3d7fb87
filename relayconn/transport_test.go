package relayconn

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lxzan/gws"
)

// Timeouts and backoff in virtual time: the relay is served over
// net.Pipe through the Dialer seam, inside a synctest bubble, so a 15 s
// idle timeout or a minute of backoff takes no real time and is measured
// exactly.

// pipeRelay is a WebSocket relay on the other end of a net.Pipe. With
// mute it never answers the upgrade; otherwise onReq runs for each REQ.
type pipeRelay struct {
	mute  bool
	onReq func(s *gws.Conn, sub string)
	dials atomic.Int64
}

func (p *pipeRelay) dial(_ context.Context, _, _ string) (net.Conn, error) {
	p.dials.Add(1)
	cli, srv := net.Pipe()
	go p.serve(srv)
	return cli, nil
}

func (p *pipeRelay) serve(nc net.Conn) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	req, err := http.ReadRequest(br)
	if err != nil || p.mute {
		_, _ = br.ReadByte() // hold the upgrade until the client gives up
		return
	}
	socket, err := gws.NewUpgrader(pipeHandler{p}, &gws.ServerOption{}).UpgradeFromConn(nc, br, req)
	if err != nil {
		return
	}
	socket.ReadLoop()
}

type pipeHandler struct{ p *pipeRelay }

func (pipeHandler) OnOpen(*gws.Conn)             {}
func (pipeHandler) OnClose(*gws.Conn, error)     {}
func (pipeHandler) OnPing(s *gws.Conn, b []byte) { _ = s.WritePong(b) }
func (pipeHandler) OnPong(*gws.Conn, []byte)     {}
func (h pipeHandler) OnMessage(s *gws.Conn, m *gws.Message) {
	defer m.Close()
	rest, ok := strings.CutPrefix(string(m.Bytes()), `["REQ","`)
	if !ok || h.p.onReq == nil {
		return
	}
	sub, _, _ := strings.Cut(rest, `"`)
	h.p.onReq(s, sub) // on the read loop: the relay's goroutines end with the connection
}

func pipeDial(t *testing.T, p *pipeRelay) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), "ws://relay.test", DialOptions{MaxFrame: 1 << 20, DialTimeout: 10 * time.Second, PingInterval: time.Hour, NetDial: p.dial})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testEvent is a frame.Parse-able EVENT body (the signature is not
// checked on the wire).
func testEvent(i int) string {
	return fmt.Sprintf(`{"id":"%064x","pubkey":"%064x","created_at":%d,"kind":1,"tags":[],"content":"","sig":"%0128x"}`, i+1, 1, 1700000000+i, 1)
}

// A page times out after exactly its idle time without a frame, and every
// event restarts that clock: a relay that sends an event every 10 s under
// a 15 s idle timeout keeps the page open; after its last event the page
// ends 15 s (plus at most one 1 s tick) later.
func TestPageIdleTimeoutVirtual(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events int
		want   time.Duration
	}{
		{"silent relay", 0, 15 * time.Second},
		{"three events 10 s apart", 3, 30*time.Second + 15*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &pipeRelay{onReq: func(s *gws.Conn, sub string) {
					for i := range tc.events {
						time.Sleep(10 * time.Second)
						_ = s.WriteMessage(gws.OpcodeText, []byte(`["EVENT","`+sub+`",`+testEvent(i)+`]`))
					}
				}}
				c := pipeDial(t, p)
				defer c.Close()
				start := time.Now()
				page, err := c.Req(context.Background(), []byte(`{"limit":10}`), 10, 15*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				took := time.Since(start)
				t.Logf("virtual time to the timeout: %v", took)
				if page.End != EndTimeout || len(page.Items) != tc.events {
					t.Fatalf("page ended %v with %d events, want timeout with %d", page.End, len(page.Items), tc.events)
				}
				if took < tc.want || took > tc.want+time.Second {
					t.Errorf("timed out after %v, want %v (+ one tick)", took, tc.want)
				}
			})
		})
	}
}

// A relay that accepts TCP but never answers the WebSocket upgrade is
// given up after exactly DialTimeout.
func TestDialTimeoutVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &pipeRelay{mute: true}
		start := time.Now()
		_, err := Dial(context.Background(), "ws://relay.test", DialOptions{MaxFrame: 1 << 20, DialTimeout: 10 * time.Second, PingInterval: time.Hour, NetDial: p.dial})
		if err == nil {
			t.Fatal("dial of a mute relay succeeded")
		}
		if took := time.Since(start); took != 10*time.Second {
			t.Errorf("gave up after %v, want the 10 s dial timeout", took)
		}
	})
}
