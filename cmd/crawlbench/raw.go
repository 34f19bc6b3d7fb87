package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lxzan/gws"
	"github.com/nostr-archiver/archiver/frame"
)

// rawOptions configure the raw reader: the relay's serving limit measured
// by a client that pages like the archiver but neither parses nor stores.
type rawOptions struct {
	URL      string
	Conns    int // connections
	Inflight int // REQs in flight per connection
	Limit    int // page limit; must not exceed what the relay serves per page
	// Since and Until bound the data; the range is cut into
	// Conns*Inflight*4 equal time shards.
	Since, Until int64
	// PageTimeout fails a page that has seen no frame for this long.
	PageTimeout time.Duration
	// Progress, if set, is called with the unique events read so far.
	Progress func(events int64)
}

// rawResult is what the raw reader read.
type rawResult struct {
	Events    int64 // unique events
	Bytes     int64 // EVENT frame payload bytes of the unique events
	WireBytes int64 // every EVENT frame payload byte, boundary repeats included
	Repeats   int64 // boundary-second events served twice
	Pages     int64
	Elapsed   time.Duration
	CPU       time.Duration // of the whole crawlbench process meanwhile
}

// errWall means a full page held only the cursor's second: paging by
// until cannot pass it, and the raw reader does not split walls as the
// archiver does.
var errWall = errors.New("a full page within one second (a wall): the raw reader cannot page past it")

// readRaw pages [Since, Until] newest-first over Conns connections with
// Inflight REQs each, as the archiver does: inclusive until cursors, the
// boundary second repeated on the next page and deduplicated by id. It
// reads only id and created_at (frame.Parse, the archiver's scan).
func readRaw(ctx context.Context, o rawOptions) (rawResult, error) {
	if o.Conns < 1 || o.Inflight < 1 || o.Limit < 1 || o.Until < o.Since {
		return rawResult{}, fmt.Errorf("raw reader: bad options %+v", o)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	conns := make([]*rawConn, 0, o.Conns)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range o.Conns {
		c, err := dialRaw(ctx, o.URL)
		if err != nil {
			return rawResult{}, err
		}
		conns = append(conns, c)
	}

	shards := timeShards(o.Since, o.Until, o.Conns*o.Inflight*4)
	queue := make(chan [2]int64, len(shards))
	for _, s := range shards {
		queue <- s
	}
	close(queue)

	var (
		res    rawResult
		events atomic.Int64
		mu     sync.Mutex
		wg     sync.WaitGroup
	)
	start, cpu0 := time.Now(), cpuTime(false)
	for _, c := range conns {
		for range o.Inflight {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine rawResult
				for s := range queue {
					if err := c.pageShard(ctx, o, s[0], s[1], &mine, &events); err != nil {
						cancel(err)
						break
					}
				}
				mu.Lock()
				res.Bytes += mine.Bytes
				res.WireBytes += mine.WireBytes
				res.Repeats += mine.Repeats
				res.Pages += mine.Pages
				mu.Unlock()
			}()
		}
	}
	if o.Progress != nil {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(progressEvery)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					o.Progress(events.Load())
				}
			}
		}()
		defer func() { close(stop); <-done }()
	}
	wg.Wait()
	res.Elapsed, res.CPU = time.Since(start), cpuTime(false)-cpu0
	res.Events = events.Load()
	if err := context.Cause(ctx); err != nil {
		return res, fmt.Errorf("raw reader: %w", err)
	}
	return res, nil
}

// timeShards cuts [since, until] into at most n disjoint ranges of nearly
// equal length, newest first.
func timeShards(since, until int64, n int) [][2]int64 {
	span := until - since + 1
	n = int(min(int64(n), span))
	out := make([][2]int64, 0, n)
	hi := until
	for i := n; i > 0; i-- {
		lo := hi - (hi-since+1)/int64(i) + 1
		out = append(out, [2]int64{lo, hi})
		hi = lo - 1
	}
	return out
}

// pageShard pages [since, until] newest-first. A short page is the end of
// the shard (the relay sent everything left); a full page moves the
// cursor to its oldest second, inclusive, so events of that second cut
// off by the limit come on the next page, and those already read are
// recognized by id.
func (c *rawConn) pageShard(ctx context.Context, o rawOptions, since, until int64, res *rawResult, events *atomic.Int64) error {
	cursor := until
	var seen map[[32]byte]struct{} // ids read at second `cursor`
	for {
		items, err := c.req(ctx, since, cursor, o.Limit, o.PageTimeout)
		if err != nil {
			return err
		}
		res.Pages++
		oldest := cursor
		var fresh int64
		for _, it := range items {
			res.WireBytes += int64(it.size)
			if it.createdAt < since || it.createdAt > cursor {
				return fmt.Errorf("relay sent created_at %d outside [%d, %d]", it.createdAt, since, cursor)
			}
			oldest = min(oldest, it.createdAt)
			if _, dup := seen[it.id]; dup && it.createdAt == cursor {
				res.Repeats++
				continue
			}
			fresh++
			res.Bytes += int64(it.size)
		}
		events.Add(fresh)
		if len(items) < o.Limit {
			return nil
		}
		if oldest == cursor {
			return fmt.Errorf("second %d: %w", cursor, errWall)
		}
		cursor = oldest
		seen = make(map[[32]byte]struct{})
		for _, it := range items {
			if it.createdAt == cursor {
				seen[it.id] = struct{}{}
			}
		}
	}
}

// rawItem is what the raw reader keeps of one EVENT frame.
type rawItem struct {
	id        [32]byte
	createdAt int64
	size      int
}

// rawConn is one gws client connection; its read loop scans frames and
// appends them to their subscription.
type rawConn struct {
	ws   *gws.Conn
	done chan struct{} // closed when the read loop returns

	mu   sync.Mutex
	subs map[string]*rawSub
	next uint64
	lost error // why the connection went away
}

type rawSub struct {
	items []rawItem
	last  atomic.Int64 // unix nanos of the last frame
	end   chan struct{}
	err   error // set before end is closed
}

func dialRaw(ctx context.Context, relay string) (*rawConn, error) {
	u, err := url.Parse(relay)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("raw reader: dial %s: %w", relay, err)
	}
	c := &rawConn{subs: map[string]*rawSub{}, done: make(chan struct{})}
	// The archiver's paging connections read 64 KiB at a time: so does
	// the baseline, or it would understate the relay's rate.
	ws, _, err := gws.NewClientFromConn(c, &gws.ClientOption{Addr: relay, HandshakeTimeout: 10 * time.Second, ReadBufferSize: 64 << 10}, nc)
	if err != nil {
		return nil, fmt.Errorf("raw reader: upgrade %s: %w", relay, err)
	}
	_ = nc.SetDeadline(time.Time{})
	c.ws = ws
	go func() {
		defer close(c.done)
		ws.ReadLoop()
	}()
	return c, nil
}

// Close closes the connection and waits for its read loop.
func (c *rawConn) Close() {
	_ = c.ws.NetConn().Close()
	<-c.done
}

// req sends one REQ for [since, until] and returns its EVENT frames once
// the relay sent EOSE.
func (c *rawConn) req(ctx context.Context, since, until int64, limit int, idle time.Duration) ([]rawItem, error) {
	s := &rawSub{end: make(chan struct{}), items: make([]rawItem, 0, limit)}
	s.last.Store(time.Now().UnixNano())
	c.mu.Lock()
	if c.lost != nil {
		c.mu.Unlock()
		return nil, c.lost
	}
	c.next++
	id := "r" + strconv.FormatUint(c.next, 36)
	c.subs[id] = s
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.subs, id)
		c.mu.Unlock()
	}()

	msg := fmt.Appendf(nil, `["REQ",%q,{"since":%d,"until":%d,"limit":%d}]`, id, since, until, limit)
	if err := c.ws.WriteMessage(gws.OpcodeText, msg); err != nil {
		return nil, fmt.Errorf("send REQ: %w", err)
	}
	tick := time.NewTicker(min(idle/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-s.end:
			if s.err != nil {
				return nil, s.err
			}
			// The archiver CLOSEs every subscription after EOSE: so do we,
			// so the relay does the same work.
			_ = c.ws.WriteMessage(gws.OpcodeText, fmt.Appendf(nil, `["CLOSE",%q]`, id))
			return s.items, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-tick.C:
			if time.Since(time.Unix(0, s.last.Load())) > idle {
				return nil, fmt.Errorf("REQ %s: no frame for %v", msg, idle)
			}
		}
	}
}

// OnOpen, OnPing, OnPong, OnClose and OnMessage are the gws handler.
func (c *rawConn) OnOpen(*gws.Conn)              {}
func (c *rawConn) OnPing(ws *gws.Conn, p []byte) { _ = ws.WritePong(p) }
func (c *rawConn) OnPong(*gws.Conn, []byte)      {}
func (c *rawConn) OnClose(_ *gws.Conn, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failAllLocked(fmt.Errorf("connection lost: %w", err))
}

// endLocked finishes subscription id with err (nil: EOSE).
func (c *rawConn) endLocked(id string, err error) {
	if s, ok := c.subs[id]; ok {
		s.err = err
		close(s.end)
		delete(c.subs, id)
	}
}

func (c *rawConn) failAllLocked(err error) {
	if c.lost == nil {
		c.lost = err
	}
	for id := range c.subs {
		c.endLocked(id, err)
	}
}

func (c *rawConn) OnMessage(_ *gws.Conn, msg *gws.Message) {
	defer msg.Close()
	b := msg.Bytes()
	m, err := frame.Parse(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		// The fixture has no bad frames: one means a broken relay.
		c.failAllLocked(fmt.Errorf("frame %.80q: %w", b, err))
	case m.Label == frame.Event:
		if s, ok := c.subs[m.SubID]; ok {
			s.items = append(s.items, rawItem{id: m.ID, createdAt: m.CreatedAt, size: len(b)})
			s.last.Store(time.Now().UnixNano())
		}
	case m.Label == frame.EOSE:
		c.endLocked(m.SubID, nil)
	case m.Label == frame.Closed:
		c.endLocked(m.SubID, fmt.Errorf("relay CLOSED the REQ: %s", m.Message))
	case m.Label == frame.Notice:
		// A NOTICE names no subscription: fail every page in flight, the
		// benchmark needs a relay that serves them all.
		c.failAllLocked(fmt.Errorf("relay NOTICE: %s", m.Message))
	}
}

// probeRange finds the oldest and newest created_at the relay serves,
// with single-event REQs: the newest directly, the oldest by bisection on
// until (about 32 REQs).
func probeRange(ctx context.Context, relay string, timeout time.Duration) (oldest, newest int64, err error) {
	c, err := dialRaw(ctx, relay)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	newestAt := func(until int64) (int64, bool, error) {
		items, err := c.req(ctx, 0, until, 1, timeout)
		if err != nil || len(items) == 0 {
			return 0, false, err
		}
		return items[0].createdAt, true, nil
	}
	newest, ok, err := newestAt(1<<40 - 1)
	if err != nil {
		return 0, 0, err
	}
	if !ok {
		return 0, 0, errors.New("the relay serves no events")
	}
	lo, hi := int64(0), newest // the oldest is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		at, ok, err := newestAt(mid)
		if err != nil {
			return 0, 0, err
		}
		if ok {
			hi = at
		} else {
			lo = mid + 1
		}
	}
	return lo, newest, nil
}
