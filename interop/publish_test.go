package interop

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/lxzan/gws"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/frame"
)

// publisher sends EVENTs on one WebSocket with at most cap(slots)
// awaiting their OK.
type publisher struct {
	gws.BuiltinEventHandler
	ws     *gws.Conn
	done   chan struct{} // closed when the read loop exits
	closed chan struct{} // closed by OnClose
	slots  chan struct{}

	mu       sync.Mutex
	pending  map[[32]byte]bool
	accepted int
	failures []string
}

// publish sends every event received from events to the relay at
// relayURL until events is closed, fails the test unless each one is
// answered ["OK", id, true, ...], and returns how many it sent.
func publish(t *testing.T, ctx context.Context, relayURL string, events <-chan *event.Event, inFlight int) int {
	t.Helper()
	u, err := url.Parse(relayURL)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	p := &publisher{
		done: make(chan struct{}), closed: make(chan struct{}),
		slots: make(chan struct{}, inFlight), pending: map[[32]byte]bool{},
	}
	p.ws, _, err = gws.NewClientFromConn(p, &gws.ClientOption{Addr: relayURL}, nc)
	if err != nil {
		t.Fatalf("connect %s: %v", relayURL, err)
	}
	_ = nc.SetDeadline(time.Time{}) // gws leaves the handshake deadline set
	go func() {
		defer close(p.done)
		p.ws.ReadLoop()
	}()
	defer func() {
		_ = p.ws.WriteClose(1000, nil)
		_ = nc.Close()
		<-p.done
	}()

	var buf []byte
	sent := 0
	for e := range events {
		sent++
		if err := p.acquire(ctx); err != nil {
			p.report(t)
			t.Fatalf("publishing: %v (%d accepted so far)", err, p.acceptedCount())
		}
		p.mu.Lock()
		p.pending[e.ID] = true
		p.mu.Unlock()
		buf = append(append(buf[:0], `["EVENT",`...), event.AppendJSON(nil, e)...)
		buf = append(buf, ']')
		if err := p.ws.WriteMessage(gws.OpcodeText, buf); err != nil {
			t.Fatalf("send EVENT: %v", err)
		}
	}
	// Every slot back means every OK arrived.
	for range inFlight {
		if err := p.acquire(ctx); err != nil {
			p.report(t)
			t.Fatalf("waiting for OKs: %v (%d of %d accepted)", err, p.acceptedCount(), sent)
		}
	}
	p.report(t)
	if n := p.acceptedCount(); n != sent {
		t.Fatalf("relay accepted %d of %d events", n, sent)
	}
	return sent
}

// report fails the test with the first few unexpected answers.
func (p *publisher) report(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, f := range p.failures {
		if i == 10 {
			t.Errorf("... and %d more", len(p.failures)-i)
			break
		}
		t.Error(f)
	}
}

func (p *publisher) acquire(ctx context.Context) error {
	select {
	case p.slots <- struct{}{}:
		return nil
	case <-p.closed:
		return fmt.Errorf("relay closed the connection")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *publisher) acceptedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// OnClose implements gws.Event.
func (p *publisher) OnClose(*gws.Conn, error) { close(p.closed) }

// OnMessage implements gws.Event.
func (p *publisher) OnMessage(_ *gws.Conn, msg *gws.Message) {
	defer msg.Close()
	m, err := frame.Parse(msg.Bytes())
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err != nil:
		p.failures = append(p.failures, fmt.Sprintf("unparsable frame %.200q: %v", msg.Bytes(), err))
	case m.Label != frame.OK:
		p.failures = append(p.failures, fmt.Sprintf("unexpected %s frame %.200q", m.Label, msg.Bytes()))
	case !p.pending[m.ID]:
		p.failures = append(p.failures, fmt.Sprintf("OK for %s, which is not in flight", hex.EncodeToString(m.ID[:])))
	default:
		delete(p.pending, m.ID)
		if m.Accepted {
			p.accepted++
		} else {
			p.failures = append(p.failures, fmt.Sprintf("relay refused %s: %q", hex.EncodeToString(m.ID[:]), m.Message))
		}
		<-p.slots
	}
}
