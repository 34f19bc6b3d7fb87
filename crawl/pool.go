package crawl

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/nostr-archiver/archiver/relayconn"
	"go.uber.org/zap"
)

var errUnreachable = errors.New("no connection")

// connPool holds one relay's connections and hands out in-flight slots on
// them: the least loaded connection with a free slot, or a new connection
// while the controller allows more. Waiters block until a slot frees.
type connPool struct {
	r       *relayCrawl
	mu      chan struct{} // a lock that waiters can select on with ctx
	conns   []*poolConn
	dialing int
	changed chan struct{} // closed and replaced when a slot frees or a dial ends
	// down is the first connection's failure after MaxAttempts dials: the
	// relay is unreachable, and every later acquire says so at once.
	down    error
	unknown map[string]int
	// late holds the late events of connections retired before they were
	// taken (takeLate), up to relayconn.MaxLateBytes of them.
	late      relayconn.Late
	lateBytes int
}

type poolConn struct {
	c        *relayconn.Conn
	inflight int
}

func newConnPool(r *relayCrawl) *connPool {
	p := &connPool{r: r, mu: make(chan struct{}, 1), changed: make(chan struct{})}
	return p
}

func (p *connPool) lock()   { p.mu <- struct{}{} }
func (p *connPool) unlock() { <-p.mu }

// acquire returns a connection with a free in-flight slot, dialing one if
// the controller's target allows. The slot must be given back with release.
func (p *connPool) acquire(ctx context.Context) (*poolConn, error) {
	return p.acquireWithin(ctx, p.r.target)
}

// acquireWithin is acquire with the target given by limits. Until a
// connection is open, one caller dials and the others wait for its
// outcome: they would only fail alongside it.
func (p *connPool) acquireWithin(ctx context.Context, limits func() (conns, inflight int)) (*poolConn, error) {
	for {
		maxConns, maxInflight := limits()
		p.lock()
		if p.down != nil {
			p.unlock()
			return nil, p.down
		}
		p.reap()
		var best *poolConn
		for _, pc := range p.conns {
			if pc.inflight < maxInflight && (best == nil || pc.inflight < best.inflight) {
				best = pc
			}
		}
		if best != nil {
			best.inflight++
			p.unlock()
			return best, nil
		}
		if n := len(p.conns) + p.dialing; n == 0 || len(p.conns) > 0 && n < maxConns {
			first := n == 0
			p.dialing++
			p.unlock()
			c, err := p.dial(ctx, first)
			p.lock()
			p.dialing--
			p.signal()
			if err != nil {
				if errors.Is(err, errUnreachable) {
					p.down = err
				}
				wait, have := p.changed, len(p.conns) > 0
				p.unlock()
				if (first && !have) || ctx.Err() != nil {
					return nil, err
				}
				// The relay refused one more connection (the controller
				// has heard): wait for a slot on the ones we have.
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-wait:
				case <-time.After(250 * time.Millisecond):
				}
				continue
			}
			pc := &poolConn{c: c, inflight: 1}
			p.conns = append(p.conns, pc)
			p.r.metrics.conns.Inc()
			p.unlock()
			return pc, nil
		}
		wait := p.changed
		p.unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wait:
		case <-time.After(250 * time.Millisecond): // the target may have grown
		}
	}
}

// release gives a slot back.
func (p *connPool) release(pc *poolConn) {
	p.lock()
	pc.inflight--
	p.signal()
	p.unlock()
}

// signal wakes the waiters. Caller holds the lock.
func (p *connPool) signal() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// reap forgets connections that went away. Caller holds the lock.
func (p *connPool) reap() {
	live := p.conns[:0]
	for _, pc := range p.conns {
		select {
		case <-pc.c.Done():
			p.retire(pc.c)
		default:
			live = append(live, pc)
		}
	}
	clear(p.conns[len(live):])
	p.conns = live
}

// dial connects with backoff. Only the relay's first connection retries
// up to MaxAttempts: an extra connection that fails is just not opened.
func (p *connPool) dial(ctx context.Context, first bool) (*relayconn.Conn, error) {
	o := p.r.c.opts
	if err := p.r.c.acquireConn(ctx, first); err != nil {
		return nil, err
	}
	attempts := o.MaxAttempts
	if !first {
		attempts = 1
	}
	var last error
	tried := 0
	for attempt := 0; attempt < attempts; attempt++ {
		if attempt > 0 {
			if p.open() > 0 {
				break // another dial got through meanwhile: use that one
			}
			if err := p.r.c.backoff(ctx, attempt); err != nil {
				p.r.c.releaseConn()
				return nil, err
			}
		}
		tried++
		do := o.dialOptions()
		do.ReadBuffer = pagingReadBuffer
		c, err := relayconn.Dial(ctx, p.r.url, do)
		if err == nil {
			return c, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
		p.r.refusedDial(err)
		p.r.log.Warn("connect failed", zap.Int("attempt", attempt+1), zap.Bool("first", first), zap.Error(err))
		if permanentDialError(err) || errors.Is(err, syscall.ECONNREFUSED) && tried >= refusedAttempts {
			break
		}
	}
	p.r.c.releaseConn()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if first {
		return nil, fmt.Errorf("%w after %d attempts: %v", errUnreachable, tried, last)
	}
	return nil, last
}

// refusedAttempts is how many dials a refused port gets: a relay that is
// restarting comes back within a second or two; a wrong port never does,
// and a person waits for the answer.
const refusedAttempts = 3

// pagingReadBuffer is the socket read size of a paging connection
// (relayconn.DialOptions.ReadBuffer): 64 KiB for each of at most
// Options.MaxConns connections.
const pagingReadBuffer = 64 << 10

// permanentDialError reports errors no retry can fix: the host name does
// not exist, the endpoint does not speak TLS, or its certificate is not
// valid for it.
func permanentDialError(err error) bool {
	var dns *net.DNSError
	var rh tls.RecordHeaderError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &dns) && dns.IsNotFound || errors.As(err, &rh) || errors.As(err, &unknownCA) ||
		errors.As(err, &hostname) || errors.As(err, &invalid)
}

// drop closes pc's connection (after a loss or silence) so the next
// acquire dials afresh.
func (p *connPool) drop(pc *poolConn) {
	p.lock()
	defer p.unlock()
	for i, o := range p.conns {
		if o == pc {
			p.retire(pc.c)
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			p.r.mu.Lock()
			p.r.rec.Reconnects++
			p.r.mu.Unlock()
			return
		}
	}
}

// retire closes c and keeps its tally of unknown labels. Caller holds the
// lock.
func (p *connPool) retire(c *relayconn.Conn) {
	c.Close()
	late := c.TakeLate()
	p.late.DroppedAfterEOSE = p.late.DroppedAfterEOSE || late.DroppedAfterEOSE
	for i, it := range late.Items {
		if p.lateBytes+len(it.Raw) > relayconn.MaxLateBytes {
			p.late.DroppedAfterEOSE = p.late.DroppedAfterEOSE || late.Info[i].AfterEOSE
			continue
		}
		p.late.Items = append(p.late.Items, it)
		p.late.Info = append(p.late.Info, late.Info[i])
		p.lateBytes += len(it.Raw)
	}
	p.r.metrics.conns.Dec()
	p.r.c.releaseConn()
	for k, v := range c.UnknownLabels() {
		if p.unknown == nil {
			p.unknown = map[string]int{}
		}
		p.unknown[k] += v
	}
}

// takeLate returns (and forgets) the events every connection, open or
// retired, got for pages already ended (relayconn.Conn.TakeLate).
func (p *connPool) takeLate() relayconn.Late {
	p.lock()
	defer p.unlock()
	late := p.late
	p.late, p.lateBytes = relayconn.Late{}, 0
	for _, pc := range p.conns {
		l := pc.c.TakeLate()
		late.Items = append(late.Items, l.Items...)
		late.Info = append(late.Info, l.Info...)
		late.DroppedAfterEOSE = late.DroppedAfterEOSE || l.DroppedAfterEOSE
	}
	return late
}

// open reports how many connections are open.
func (p *connPool) open() int {
	p.lock()
	defer p.unlock()
	return len(p.conns)
}

// unknownLabels merges the unknown frame labels of every connection so far.
func (p *connPool) unknownLabels() map[string]int {
	p.lock()
	defer p.unlock()
	var out map[string]int
	add := func(m map[string]int) {
		for k, v := range m {
			if out == nil {
				out = map[string]int{}
			}
			out[k] += v
		}
	}
	add(p.unknown)
	for _, pc := range p.conns {
		add(pc.c.UnknownLabels())
	}
	return out
}

// close closes every connection.
func (p *connPool) close() {
	p.lock()
	defer p.unlock()
	for _, pc := range p.conns {
		p.retire(pc.c)
	}
	p.conns = nil
}
