package relayconn

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lxzan/gws"
	"go.uber.org/goleak"
)

// garbageRelay answers every REQ with a stream of frames a hostile or
// broken relay could send: malformed events on the subscription, frames
// that are not JSON, events of subscriptions nobody opened, and ever new
// frame labels; never an event, never an EOSE, until Finish sends the
// EOSE of every REQ seen.
type garbageRelay struct {
	t      *testing.T
	url    string
	sent   atomic.Int64 // bytes of garbage written
	finish chan struct{}
	wg     sync.WaitGroup
}

func newGarbageRelay(t *testing.T) *garbageRelay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &garbageRelay{t: t, url: "ws://" + ln.Addr().String(), finish: make(chan struct{})}
	up := gws.NewUpgrader(garbageHandler{g}, &gws.ServerOption{Recovery: gws.Recovery})
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		socket, err := up.Upgrade(w, r)
		if err != nil {
			return
		}
		socket.ReadLoop()
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		select {
		case <-g.finish:
		default:
			close(g.finish)
		}
		srv.Close()
		g.wg.Wait()
	})
	return g
}

// Finish ends the garbage: each stream sends its EOSE and stops.
func (g *garbageRelay) Finish() { close(g.finish) }

type garbageHandler struct{ g *garbageRelay }

func (garbageHandler) OnOpen(*gws.Conn)             {}
func (garbageHandler) OnClose(*gws.Conn, error)     {}
func (garbageHandler) OnPing(s *gws.Conn, p []byte) { _ = s.WritePong(p) }
func (garbageHandler) OnPong(*gws.Conn, []byte)     {}
func (h garbageHandler) OnMessage(s *gws.Conn, m *gws.Message) {
	defer m.Close()
	req := m.Bytes()
	if !bytes.HasPrefix(req, []byte(`["REQ","`)) {
		return // CLOSE
	}
	sub := string(bytes.SplitN(req[8:], []byte(`"`), 2)[0])
	h.g.wg.Add(1)
	go func() {
		defer h.g.wg.Done()
		pad := strings.Repeat("x", 2000)
		for i := 0; ; i++ {
			select {
			case <-h.g.finish:
				_ = s.WriteMessage(gws.OpcodeText, []byte(`["EOSE","`+sub+`"]`))
				return
			default:
			}
			var f string
			switch i % 4 {
			case 0: // a malformed event on the subscription: quarantined, up to the cap
				f = fmt.Sprintf(`["EVENT","%s",{"id":"%d","content":"%s"`, sub, i, pad)
			case 1: // not JSON: an orphan
				f = fmt.Sprintf("garbage %d %s", i, pad)
			case 2: // an event of a subscription never opened
				f = fmt.Sprintf(`["EVENT","zz%d",{"content":"%s"}]`, i, pad)
			case 3: // a label nobody knows, new every time, long
				f = fmt.Sprintf(`["LABEL%d%s"]`, i, pad)
			}
			if err := s.WriteMessage(gws.OpcodeText, []byte(f)); err != nil {
				return
			}
			h.g.sent.Add(int64(len(f)))
		}
	}()
}

func dialTest(t *testing.T, url string) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), url, DialOptions{MaxFrame: 1 << 20, DialTimeout: 5 * time.Second, PingInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// A relay that streams only garbage is timed out like a silent one: no
// malformed frame refreshes a page's idle timer.
func TestGarbageTimesOut(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	g := newGarbageRelay(t)
	c := dialTest(t, g.url)
	start := time.Now()
	page, err := c.Req(context.Background(), []byte(`{"limit":10}`), 10, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if page.End != EndTimeout {
		t.Fatalf("page ended %v, want timeout", page.End)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("garbage held the page open %v (idle 1s)", el)
	}
	if g.sent.Load() < 1<<20 {
		t.Fatalf("only %d bytes of garbage were sent: the test proves nothing", g.sent.Load())
	}
	if len(page.Malformed) > maxHeldBad {
		t.Errorf("page kept %d malformed frames, cap %d", len(page.Malformed), maxHeldBad)
	}
}

// A hostile relay streaming garbage grows no memory: what a connection
// keeps of it is capped, the rest counted. What shows it is garbage many
// times the caps, not time: the stream stops after 8 times the byte cap
// (32 MiB, a few seconds), or 20 s on a machine too busy to send that.
func TestGarbageMemoryFlat(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	stream, enough := 20*time.Second, int64(8*maxHeldBadBytes)
	g := newGarbageRelay(t)
	c := dialTest(t, g.url)
	type result struct {
		page *Page
		err  error
	}
	done := make(chan result, 1)
	go func() {
		p, err := c.Req(context.Background(), []byte(`{"limit":10}`), 10, stream+30*time.Second)
		done <- result{p, err}
	}()
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	// The baseline is taken once garbage flows and the caps are reached.
	for g.sent.Load() < 2*maxHeldBadBytes {
		time.Sleep(10 * time.Millisecond)
	}
	base, peak, start := heap(), uint64(0), time.Now()
	sentAtBase := g.sent.Load()
	tick := time.NewTicker(500 * time.Millisecond)
	end := time.After(stream)
sample:
	for {
		select {
		case <-tick.C:
			peak = max(peak, heap())
			if g.sent.Load()-sentAtBase >= enough {
				break sample
			}
		case <-end:
			break sample
		}
	}
	tick.Stop()
	g.Finish()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	sent := g.sent.Load() - sentAtBase
	growth := int64(peak) - int64(base)
	t.Logf("garbage streamed after the baseline: %d MiB in %v; heap %d MiB at the baseline, peak %d MiB (growth %+d KiB)",
		sent>>20, time.Since(start).Round(time.Second), base>>20, peak>>20, growth>>10)
	// Four times what a connection may hold: the caps were reached and
	// held (a busy machine under -race streams ~1 MiB/s).
	if sent < 4*maxHeldBadBytes {
		t.Fatalf("only %d bytes of garbage streamed: the test proves nothing", sent)
	}
	if growth > 16<<20 {
		t.Errorf("heap grew %d MiB while garbage streamed", growth>>20)
	}
	if r.page.End != EndEOSE {
		t.Errorf("page ended %v, want eose", r.page.End)
	}
	orphans := c.TakeOrphans()
	if n := len(r.page.Malformed) + len(orphans); n > maxHeldBad {
		t.Errorf("kept %d malformed frames, cap %d", n, maxHeldBad)
	}
	labels := c.UnknownLabels()
	if len(labels) > 17 || labels[labelOverCap] == 0 {
		t.Errorf("unknown labels: %d entries, %d over the cap", len(labels), labels[labelOverCap])
	}
}
