package testrelay

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// DeadPort is a port where nothing speaks WebSocket, for tests of how an
// archiver treats dead relays: it accepts each connection, counts it and
// hangs up at once, so a test can count the dials a dead relay gets.
type DeadPort struct {
	ln    net.Listener
	dials atomic.Int64
	wg    sync.WaitGroup
}

// NewDeadPort listens on addr ("127.0.0.1:0" for any port).
func NewDeadPort(addr string) (*DeadPort, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	d := &DeadPort{ln: ln}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d.dials.Add(1)
			c.Close()
		}
	}()
	return d, nil
}

// URL is the ws:// URL of the port.
func (d *DeadPort) URL() string { return "ws://" + d.ln.Addr().String() }

// Dials counts the connections accepted so far.
func (d *DeadPort) Dials() int64 { return d.dials.Load() }

// Close stops listening and waits for the accept loop.
func (d *DeadPort) Close() error {
	err := d.ln.Close()
	d.wg.Wait()
	return err
}

// Refusing is a relay that answers every request, the WebSocket upgrade
// included, with 403, as a relay behind a paywall or a block does.
type Refusing struct {
	srv  *http.Server
	url  string
	done chan struct{}
}

// NewRefusing listens on addr ("127.0.0.1:0" for any port).
func NewRefusing(addr string) (*Refusing, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &Refusing{url: "ws://" + ln.Addr().String(), done: make(chan struct{}), srv: &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "blocked", http.StatusForbidden)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}}
	go func() { defer close(r.done); _ = r.srv.Serve(ln) }()
	return r, nil
}

// URL is the ws:// URL of the relay.
func (r *Refusing) URL() string { return r.url }

// Close stops the server and waits for it.
func (r *Refusing) Close() error {
	err := r.srv.Close()
	<-r.done
	return err
}
