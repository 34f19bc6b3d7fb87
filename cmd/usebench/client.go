package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/lxzan/gws"
)

// client is one WebSocket connection to serve; messages arrive on msgs
// (bounded: a full channel stops the read loop, and serve's backpressure
// takes over).
type client struct {
	conn *gws.Conn
	msgs chan []byte
	done chan struct{} // the read loop returned
	sub  int
}

type handler struct {
	gws.BuiltinEventHandler
	c *client
}

func (h handler) OnMessage(_ *gws.Conn, m *gws.Message) {
	h.c.msgs <- bytes.Clone(m.Bytes())
	_ = m.Close()
}

func dial(url string) (*client, error) {
	nc, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "ws://"), 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", url, err)
	}
	c := &client{msgs: make(chan []byte, 4096), done: make(chan struct{})}
	conn, _, err := gws.NewClientFromConn(handler{c: c}, &gws.ClientOption{Addr: url, ReadMaxPayloadSize: 64 << 20}, nc)
	if err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("websocket handshake with %s: %w", url, err)
	}
	c.conn = conn
	go func() {
		defer close(c.done)
		conn.ReadLoop()
	}()
	return c, nil
}

// close drops the connection and waits for the read loop, draining what
// it still hands over.
func (c *client) close() {
	_ = c.conn.NetConn().Close()
	for {
		select {
		case <-c.msgs:
		case <-c.done:
			return
		}
	}
}

// req sends one REQ of filter and reads to its EOSE, returning the events
// and the bytes of their frames.
func (c *client) req(ctx context.Context, filter string) (events, size int64, err error) {
	c.sub++
	id := fmt.Sprintf("q%d", c.sub)
	if err := c.conn.WriteString(fmt.Sprintf(`["REQ",%q,%s]`, id, filter)); err != nil {
		return 0, 0, fmt.Errorf("send REQ %s: %w", filter, err)
	}
	eose := []byte(fmt.Sprintf(`["EOSE",%q]`, id))
	timeout := time.NewTimer(5 * time.Minute)
	defer timeout.Stop()
	for {
		select {
		case m := <-c.msgs:
			switch {
			case bytes.HasPrefix(m, []byte(`["EVENT"`)):
				events++
				size += int64(len(m))
			case bytes.Equal(m, eose):
				err := c.conn.WriteString(fmt.Sprintf(`["CLOSE",%q]`, id))
				return events, size, err
			case bytes.HasPrefix(m, []byte(`["CLOSED"`)) || bytes.HasPrefix(m, []byte(`["NOTICE"`)):
				return events, size, fmt.Errorf("REQ %s: serve answered %s", filter, m)
			}
		case <-c.done:
			return events, size, fmt.Errorf("REQ %s: serve closed the connection", filter)
		case <-timeout.C:
			return events, size, fmt.Errorf("REQ %s: no EOSE in 5 minutes", filter)
		case <-ctx.Done():
			return events, size, ctx.Err()
		}
	}
}

// time runs q's REQs one after another.
func (c *client) time(ctx context.Context, q query) (reqResult, error) {
	r := reqResult{name: q.name}
	for _, f := range q.filters {
		start := time.Now()
		n, _, err := c.req(ctx, f)
		if err != nil {
			return r, err
		}
		r.durations = append(r.durations, time.Since(start))
		r.events += n
	}
	return r, nil
}

// bulk downloads every event in one REQ.
func (c *client) bulk(ctx context.Context, want int64) (events, size int64, took time.Duration, err error) {
	start := time.Now()
	events, size, err = c.req(ctx, fmt.Sprintf(`{"limit":%d}`, want))
	took = time.Since(start)
	if err == nil && events != want {
		err = fmt.Errorf("bulk download: %d events of %d", events, want)
	}
	return events, size, took, err
}
