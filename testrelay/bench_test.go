package testrelay

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lxzan/gws"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchFixture is TESTRELAY_BENCH_EVENTS (default 100,000) signed events,
// cached under TESTRELAY_CACHE or the user cache dir across runs.
func benchFixture(b *testing.B) *Fixture {
	b.Helper()
	dir := os.Getenv("TESTRELAY_CACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			b.Skip("no cache dir:", err)
		}
		dir = filepath.Join(base, "nostr-archiver", "testrelay")
	}
	start := time.Now()
	f, err := Generate(FixtureOptions{Seed: 1, Events: envInt("TESTRELAY_BENCH_EVENTS", 100_000), CacheDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("fixture of %d events in %v", len(f.Items), time.Since(start).Round(time.Millisecond))
	return f
}

// BenchmarkServePaged reads the whole store through TESTRELAY_BENCH_CONNS
// (default 4) connections, each paging its own created_at shard with
// `until` cursors, one REQ in flight, pages clamped at 500: the loop a
// crawler runs, with the least client work (a fixed-layout scan per event).
// With TESTRELAY_URL it reads that relay instead (cmd/testrelay serving
// the same fixture in another process).
func BenchmarkServePaged(b *testing.B) {
	f := benchFixture(b)
	url := os.Getenv("TESTRELAY_URL")
	if url == "" {
		url = newRelay(b, Options{}, f.Items...).URL()
	}
	conns := envInt("TESTRELAY_BENCH_CONNS", 4)
	var events, bytesIn int64
	b.ResetTimer()
	for b.Loop() {
		n, nb := pagedRead(b, url, f.Since, f.Until, conns)
		if n != len(f.Valid) {
			b.Fatalf("read %d distinct events, stored %d", n, len(f.Valid))
		}
		events += int64(n)
		bytesIn += nb
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(events)/sec, "events/s")
	b.ReportMetric(float64(bytesIn)/sec/1e6, "MB/s")
	b.ReportMetric(0, "ns/op")
}

// pagedRead pages [since, until] split in conns shards and returns the
// distinct events and the payload bytes received.
func pagedRead(b *testing.B, url string, since, until int64, conns int) (int, int64) {
	span := (until - since + 1) / int64(conns)
	pagers := make([]*pager, conns)
	var wg sync.WaitGroup
	for i := range pagers {
		lo := since + int64(i)*span
		hi := lo + span - 1
		if i == conns-1 {
			hi = until
		}
		p := &pager{since: lo, until: hi, oldest: hi + 1, boundary: map[[32]byte]bool{}, next: map[[32]byte]bool{},
			done: make(chan struct{}), closed: make(chan struct{})}
		pagers[i] = p
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.run(b, url)
		}()
	}
	wg.Wait()
	n, nb := 0, int64(0)
	for _, p := range pagers {
		if p.err != "" {
			b.Fatal(p.err)
		}
		n += p.distinct
		nb += p.bytes
	}
	return n, nb
}

// pager is a raw paged reader of one shard; its gws handler pages from
// inside OnMessage.
type pager struct {
	gws.BuiltinEventHandler
	since, until int64
	oldest       int64
	fresh        int
	boundary     map[[32]byte]bool // ids already read at second `until`
	next         map[[32]byte]bool // ids read at second `oldest` in this page
	distinct     int
	bytes        int64
	err          string
	done         chan struct{} // paging finished
	closed       chan struct{} // ReadLoop returned
}

func (p *pager) run(b *testing.B, url string) {
	nc, err := net.Dial("tcp", strings.TrimPrefix(url, "ws://"))
	if err != nil {
		p.err = err.Error()
		return
	}
	conn, _, err := gws.NewClientFromConn(p, &gws.ClientOption{Addr: url, ReadBufferSize: 64 << 10}, nc)
	if err != nil {
		p.err = err.Error()
		return
	}
	go conn.ReadLoop()
	p.request(conn)
	select {
	case <-p.done:
	case <-time.After(10 * time.Minute):
		p.err = "pager timed out"
	}
	_ = conn.NetConn().Close()
	<-p.closed
}

func (p *pager) OnClose(*gws.Conn, error) { close(p.closed) }

func (p *pager) request(conn *gws.Conn) {
	req := strconv.AppendInt([]byte(`["REQ","p",{"since":`), p.since, 10)
	req = append(req, `,"until":`...)
	req = strconv.AppendInt(req, p.until, 10)
	req = append(req, `,"limit":500}]`...)
	if err := conn.WriteMessage(gws.OpcodeText, req); err != nil {
		p.finish(err.Error())
	}
}

// finish ends paging; it runs on the reader goroutine, at most once.
func (p *pager) finish(err string) {
	select {
	case <-p.done:
	default:
		p.err = err
		close(p.done)
	}
}

const eventPrefix = `["EVENT","p",`

func (p *pager) OnMessage(conn *gws.Conn, m *gws.Message) {
	defer m.Close()
	data := m.Bytes()
	p.bytes += int64(len(data))
	if obj, ok := bytes.CutPrefix(data, []byte(eventPrefix)); ok {
		x, ok := parseExportLine(obj[:len(obj)-1])
		if !ok {
			p.finish("unexpected event layout: " + string(data))
			return
		}
		if x.createdAt == p.until && p.boundary[x.id] {
			return
		}
		if x.createdAt < p.oldest {
			p.oldest = x.createdAt
			clear(p.next)
		}
		p.next[x.id] = true
		p.fresh++
		return
	}
	if !bytes.HasPrefix(data, []byte(`["EOSE",`)) {
		p.finish("unexpected message: " + string(data))
		return
	}
	p.distinct += p.fresh
	if p.fresh == 0 {
		p.finish("")
		return
	}
	p.fresh = 0
	if p.oldest == p.until { // a page inside one second: remember it all
		for id := range p.next {
			p.boundary[id] = true
		}
	} else {
		p.boundary, p.next = p.next, p.boundary
		p.until = p.oldest
	}
	clear(p.next)
	p.oldest = p.until + 1
	p.request(conn)
}

// discardConn is a net.Conn whose writes go nowhere.
type discardConn struct{ net.Conn }

func (discardConn) Write(p []byte) (int, error) { return len(p), nil }
func (discardConn) Close() error                { return nil }

// BenchmarkServePage is the relay's own cost per page of 500 events:
// window search, filter, framing, without the network.
func BenchmarkServePage(b *testing.B) {
	f := benchFixture(b)
	r := newRelay(b, Options{}, f.Items...)
	c := &conn{r: r, wire: &wireConn{Conn: discardConn{}}, stop: make(chan struct{})}
	subJSON := []byte(`"p"`)
	mid := f.Since + (f.Until-f.Since)/2
	until := mid
	events := 0
	var nbytes int64
	b.ResetTimer()
	for b.Loop() {
		fl := filter{until: &until}
		if err := c.serve(job{sub: &sub{}, subJSON: subJSON, filters: []filter{fl}}); err != nil {
			b.Fatal(err)
		}
		events += len(c.pos)
		for _, p := range c.pos {
			nbytes += int64(len(r.store.snap.Load().items[p].Raw))
		}
		until-- // a fresh window each time
		if until < f.Since+(f.Until-f.Since)/4 {
			until = mid
		}
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(events)/sec, "events/s")
	b.ReportMetric(float64(nbytes)/sec/1e6, "MB/s")
}
