package relayconn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lxzan/gws"
	"github.com/nostr-archiver/archiver/bip340"
)

// Timeouts and backoff in virtual time: the relay is served over
// net.Pipe through the NetDial seam, inside a synctest bubble, so a 15 s
// idle timeout or a minute of backoff takes no real time and is measured
// exactly.

// pipeRelay is a WebSocket relay on the other end of a net.Pipe. With
// mute it never answers the upgrade; otherwise it sends greet on open and
// onMsg runs for each frame, on a goroutine of its own: net.Pipe has no
// buffer, so a relay sleeping on its read loop would block our CLOSE.
type pipeRelay struct {
	mute  bool
	greet string
	onMsg func(s relaySide, msg string)
	pings atomic.Int64
}

// relaySide is the relay's end of one connection.
type relaySide struct {
	*gws.Conn
	gone chan struct{} // closed when the connection has ended
}

// Sleep waits d and reports whether the connection is still there: the
// relay's goroutines must end with it (a bubble cannot end while one
// sleeps on).
func (s relaySide) Sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.gone:
		return false
	}
}

func (p *pipeRelay) dial(_ context.Context, _, _ string) (net.Conn, error) {
	cli, srv := net.Pipe()
	go p.serve(srv)
	return cli, nil
}

func (p *pipeRelay) serve(nc net.Conn) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	req, err := http.ReadRequest(br)
	if err != nil || p.mute {
		_, _ = io.Copy(io.Discard, br) // hold the upgrade (or TLS handshake) until the client gives up
		return
	}
	h := pipeHandler{p: p, gone: make(chan struct{})}
	defer close(h.gone)
	socket, err := gws.NewUpgrader(h, &gws.ServerOption{}).UpgradeFromConn(nc, br, req)
	if err != nil {
		return
	}
	if p.greet != "" {
		_ = socket.WriteMessage(gws.OpcodeText, []byte(p.greet))
	}
	socket.ReadLoop()
}

type pipeHandler struct {
	p    *pipeRelay
	gone chan struct{}
}

func (pipeHandler) OnOpen(*gws.Conn)         {}
func (pipeHandler) OnClose(*gws.Conn, error) {}
func (h pipeHandler) OnPing(s *gws.Conn, b []byte) {
	h.p.pings.Add(1)
	_ = s.WritePong(b)
}
func (pipeHandler) OnPong(*gws.Conn, []byte) {}
func (h pipeHandler) OnMessage(s *gws.Conn, m *gws.Message) {
	defer m.Close()
	if h.p.onMsg != nil {
		go h.p.onMsg(relaySide{s, h.gone}, string(m.Bytes()))
	}
}

// onReq is an onMsg that runs fn for each REQ with its subscription id.
func onReq(fn func(s relaySide, sub string)) func(relaySide, string) {
	return func(s relaySide, msg string) {
		if rest, ok := strings.CutPrefix(msg, `["REQ","`); ok {
			sub, _, _ := strings.Cut(rest, `"`)
			fn(s, sub)
		}
	}
}

func pipeOptions(p *pipeRelay) DialOptions {
	return DialOptions{MaxFrame: 1 << 20, DialTimeout: 10 * time.Second, PingInterval: time.Hour, NetDial: p.dial}
}

func pipeDial(t *testing.T, p *pipeRelay) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), "ws://relay.test", pipeOptions(p))
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

// A page times out exactly its idle time after its last frame: a relay
// that sends an event every 10 s under a 15 s idle timeout keeps the page
// open, and garbage does not (it moves no subscription on).
func TestPageIdleTimeoutVirtual(t *testing.T) {
	for _, tc := range []struct {
		name    string
		events  int
		garbage bool // a malformed frame every 5 s besides
		want    time.Duration
	}{
		{"silent relay", 0, false, 15 * time.Second},
		{"three events 10 s apart", 3, false, 30*time.Second + 15*time.Second},
		{"garbage every 5 s", 0, true, 15 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &pipeRelay{onMsg: onReq(func(s relaySide, sub string) {
					for i := 0; i < tc.events && s.Sleep(10*time.Second); i++ {
						_ = s.WriteMessage(gws.OpcodeText, []byte(`["EVENT","`+sub+`",`+testEvent(i)+`]`))
					}
					for tc.garbage && s.Sleep(5*time.Second) {
						_ = s.WriteMessage(gws.OpcodeText, []byte(`["EVENT","`+sub+`",{"id":`))
					}
				})}
				c := pipeDial(t, p)
				defer c.Close()
				start := time.Now()
				page, err := c.Req(context.Background(), []byte(`{"limit":10}`), 10, 15*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				took := time.Since(start)
				if page.End != EndTimeout || len(page.Items) != tc.events {
					t.Fatalf("page ended %v with %d events, want timeout with %d", page.End, len(page.Items), tc.events)
				}
				if took != tc.want || page.Latency != tc.want {
					t.Errorf("timed out after %v (latency %v), want exactly %v", took, page.Latency, tc.want)
				}
			})
		})
	}
}

// A relay that never completes the connection is given up after exactly
// DialTimeout, at whichever step it stalls: TCP connect, TLS handshake or
// WebSocket upgrade.
func TestDialTimeoutVirtual(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		netDial   func(p *pipeRelay) func(context.Context, string, string) (net.Conn, error)
		want      string
	}{
		{"connect never completes", "ws://relay.test", func(*pipeRelay) func(context.Context, string, string) (net.Conn, error) {
			return func(ctx context.Context, _, _ string) (net.Conn, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			}
		}, "dial ws://relay.test: context deadline exceeded"},
		{"TLS handshake unanswered", "wss://relay.test", func(p *pipeRelay) func(context.Context, string, string) (net.Conn, error) { return p.dial }, "tls wss://relay.test"},
		{"upgrade unanswered", "ws://relay.test", func(p *pipeRelay) func(context.Context, string, string) (net.Conn, error) { return p.dial }, "upgrade ws://relay.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &pipeRelay{mute: true}
				o := pipeOptions(p)
				o.NetDial = tc.netDial(p)
				start := time.Now()
				_, err := Dial(context.Background(), tc.url, o)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("dial: %v, want an error containing %q", err, tc.want)
				}
				if took := time.Since(start); took != o.DialTimeout {
					t.Errorf("gave up after %v, want exactly the %v dial timeout", took, o.DialTimeout)
				}
			})
		})
	}
}

// The retry schedule: BackoffMin doubled per attempt up to BackoffMax,
// the jitter's pick in [d/2, d], and Wait takes exactly that long (or
// ends with its context).
func TestBackoffVirtual(t *testing.T) {
	full := func(d time.Duration) time.Duration { return d }
	half := func(d time.Duration) time.Duration { return d / 2 }
	for _, tc := range []struct {
		name   string
		jitter func(time.Duration) time.Duration
		want   []time.Duration // attempts 1, 2, ...
	}{
		{"most", full, []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}},
		{"least", half, []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 15 * time.Second, 15 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := Backoff{Min: 250 * time.Millisecond, Max: 30 * time.Second, Jitter: tc.jitter}
				for i, want := range tc.want {
					start := time.Now()
					if err := b.Wait(context.Background(), i+1); err != nil {
						t.Fatal(err)
					}
					if took := time.Since(start); took != want {
						t.Errorf("attempt %d waited %v, want %v", i+1, took, want)
					}
				}
			})
		})
	}
	t.Run("random jitter stays in range", func(t *testing.T) {
		b := Backoff{Min: 250 * time.Millisecond, Max: 30 * time.Second}
		for attempt := 1; attempt < 40; attempt++ {
			d := min(b.Min<<min(attempt, 16), b.Max)
			if got := b.Delay(attempt); got < d/2 || got > d {
				t.Errorf("attempt %d: %v, want within [%v, %v]", attempt, got, d/2, d)
			}
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			start := time.Now()
			err := Backoff{Min: time.Minute, Max: time.Hour}.Wait(ctx, 1)
			if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 3*time.Second {
				t.Errorf("Wait: %v after %v, want the context's end after 3s", err, time.Since(start))
			}
		})
	})
}

// AUTH waits at most its timeout for the relay's challenge, and as long
// again for the OK to the AUTH event it sent.
func TestAuthTimeoutVirtual(t *testing.T) {
	key, err := bip340.NewPrivateKey(append(make([]byte, 31), 1))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		greet string
		want  string
	}{
		{"no challenge", "", "sent no challenge within 5s"},
		{"no OK", `["AUTH","c1"]`, "no OK within 5s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := pipeDial(t, &pipeRelay{greet: tc.greet})
				defer c.Close()
				synctest.Wait() // the greeting, if any, has arrived
				start := time.Now()
				sent, err := c.Authenticate(context.Background(), key, 5*time.Second)
				if !sent || err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Authenticate: sent %v, %v; want %q", sent, err, tc.want)
				}
				if took := time.Since(start); took != 5*time.Second {
					t.Errorf("gave up after %v, want exactly 5s", took)
				}
			})
		})
	}
}

// A NIP-77 reconciliation the relay never answers is refused after
// exactly the idle time.
func TestNegTimeoutVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := pipeDial(t, &pipeRelay{})
		defer c.Close()
		start := time.Now()
		_, err := Reconcile(context.Background(), c, []byte(`{}`), nil, 20*time.Second)
		if !errors.Is(err, ErrNegRefused) {
			t.Fatalf("Reconcile: %v, want ErrNegRefused", err)
		}
		if took := time.Since(start); took != 20*time.Second {
			t.Errorf("gave up after %v, want exactly 20s", took)
		}
	})
}

// A quiet connection is pinged every PingInterval, no more.
func TestPingIntervalVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &pipeRelay{}
		o := pipeOptions(p)
		o.PingInterval = 30 * time.Second
		c, err := Dial(context.Background(), "ws://relay.test", o)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		time.Sleep(95 * time.Second)
		synctest.Wait()
		if n := p.pings.Load(); n != 3 {
			t.Errorf("%d pings in 95s, want 3 (every 30s)", n)
		}
	})
}

// readSizeConn records the largest read asked of the socket.
type readSizeConn struct {
	net.Conn
	max *atomic.Int64
}

func (c readSizeConn) Read(p []byte) (int, error) {
	if int64(len(p)) > c.max.Load() {
		c.max.Store(int64(len(p)))
	}
	return c.Conn.Read(p)
}

// TestReadBuffer: DialOptions.ReadBuffer is the size of the reads from
// the socket (a paging connection's 64 KiB), gws's 4 KiB without it.
func TestReadBuffer(t *testing.T) {
	for _, tc := range []struct{ opt, want int }{{0, 4 << 10}, {64 << 10, 64 << 10}} {
		p := &pipeRelay{}
		var max atomic.Int64
		o := pipeOptions(p)
		o.ReadBuffer = tc.opt
		o.NetDial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := p.dial(ctx, network, addr)
			return readSizeConn{nc, &max}, err
		}
		c, err := Dial(context.Background(), "ws://relay.test", o)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if got := max.Load(); got != int64(tc.want) {
			t.Errorf("ReadBuffer %d: reads of up to %d bytes, want %d", tc.opt, got, tc.want)
		}
	}
}
