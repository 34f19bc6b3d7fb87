package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/discover"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/relayconn"
	"github.com/nostr-archiver/archiver/sched"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Kinds of the daemon's notes in the archive (rawstore.PutNotes).
const (
	noteSchedule   = 's' // url -> sched.Record (JSON): backoff survives restarts
	noteDiscovered = 'f' // url -> Discovered (JSON): the persisted frontier
)

// Discovered is where discovery learned a relay.
type Discovered struct {
	How  string `json:"how"`  // discover.FromRelayList, ...
	From string `json:"from"` // the id of the event that named it
	At   int64  `json:"at"`   // unix seconds
}

// Timings of the scheduler's I/O side.
const (
	// probeTimeout bounds one probe (TCP, TLS, WebSocket upgrade).
	probeTimeout = 10 * time.Second
	// notesEvery is how often changed notes are written (one synced
	// batch): what a kill -9 may lose is the last second's backoff steps.
	notesEvery = time.Second
)

// summaryEvery is how often failures are logged, as one line; a variable
// so that a test shortens it.
var summaryEvery = time.Minute

// newScheduler builds the scheduler from the configuration's limits.
func (d *Daemon) newScheduler() *sched.Scheduler {
	lim := d.cfg.Limits
	return sched.New(sched.Options{
		Policy: sched.Policy{
			MaxDials: lim.MaxDials, DialsPerSecond: float64(lim.DialsPerSecond),
			BackoffMin: time.Duration(lim.BackoffMin), BackoffMax: time.Duration(lim.BackoffMax), Jitter: 0.2,
		},
		Probe: d.probe,
		Run: func(ctx context.Context, u string, lease *sched.Lease) sched.Outcome {
			d.mu.Lock()
			l := d.relays[u]
			d.mu.Unlock()
			if l == nil {
				return sched.Outcome{Done: true}
			}
			return l.run(ctx, lease)
		},
		Persist: func(u string, r sched.Record) {
			b, _ := json.Marshal(r)
			d.notes.put(noteSchedule, u, b)
		},
		Host: hostOf,
	})
}

func hostOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	return p.Hostname()
}

// probe dials the relay once, through the WebSocket upgrade, and hangs
// up: only a relay that answers gets a crawl (whose own dials retry), so
// dead and refusing relays cost one bounded attempt per backoff step.
func (d *Daemon) probe(ctx context.Context, u string) error {
	c, err := relayconn.Dial(ctx, u, relayconn.DialOptions{
		MaxFrame: int(d.cfg.Limits.MaxFrameBytes), DialTimeout: probeTimeout, NetDial: d.dialerFor(u),
		PingInterval: time.Minute, // hung up at once; Dial requires one
	})
	if err != nil {
		return fmt.Errorf("probe %s: %w", u, err)
	}
	c.Close()
	return nil
}

// dialerFor is the TCP dialer for relay u: for a discovered relay, unless
// private targets are allowed, one that refuses to connect to a private
// address, whatever name resolved to it.
func (d *Daemon) dialerFor(u string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	l := d.relays[u]
	d.mu.Unlock()
	if l == nil || l.found == nil || d.cfg.Discover.AllowPrivate {
		return nil
	}
	return publicOnly
}

// publicOnly connects only to public addresses, whatever name resolved to
// the address: the dial-time half of the private-target guard.
var publicOnly = (&net.Dialer{Control: func(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || discover.PrivateAddr(ap.Addr()) {
		return fmt.Errorf("%s is a private address: refused for a discovered relay or a job", address)
	}
	return nil
}}).DialContext

// notes batches the daemon's notes to the archive: writers only mark a
// note dirty; one goroutine writes them every notesEvery in one synced
// batch per kind, and once more at the stop.
type notes struct {
	store *rawstore.Store
	log   *zap.Logger

	mu    sync.Mutex
	dirty map[byte]map[string][]byte
	// writing counts the notes flush took and has not yet written: they
	// are unsaved until their batch is synced (a kill -9 between the two
	// lost the frontier /status called saved).
	writing int
}

func (n *notes) put(kind byte, u string, v []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.kind(kind)[u] = v
}

// kind returns the dirty notes of one kind. Caller holds n.mu.
func (n *notes) kind(kind byte) map[string][]byte {
	if n.dirty == nil {
		n.dirty = map[byte]map[string][]byte{}
	}
	if n.dirty[kind] == nil {
		n.dirty[kind] = map[string][]byte{}
	}
	return n.dirty[kind]
}

// unsaved counts the notes not written yet.
func (n *notes) unsaved() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	total := n.writing
	for _, m := range n.dirty {
		total += len(m)
	}
	return total
}

func (n *notes) flush() {
	n.mu.Lock()
	dirty := n.dirty
	n.dirty = nil
	for _, m := range dirty {
		n.writing += len(m)
	}
	n.mu.Unlock()
	for kind, m := range dirty {
		err := n.store.PutNotes(kind, m)
		n.mu.Lock()
		n.writing -= len(m)
		if err != nil {
			n.log.Error("saving relay notes", zap.Int("notes", len(m)), zap.Error(err))
			for u, v := range m { // kept for the next round, unless newer
				n.putLockedIfAbsent(kind, u, v)
			}
		}
		n.mu.Unlock()
	}
}

func (n *notes) putLockedIfAbsent(kind byte, u string, v []byte) {
	m := n.kind(kind)
	if _, ok := m[u]; !ok {
		m[u] = v
	}
}

// run writes the notes every notesEvery until ctx ends, then once more.
func (n *notes) run(ctx context.Context) {
	every(ctx, notesEvery, n.flush)
	n.flush()
}

// every calls f each period until ctx ends.
func every(ctx context.Context, period time.Duration, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// RelayNote is what the daemon keeps in the archive on one relay URL.
type RelayNote struct {
	Schedule   *sched.Record `json:"schedule,omitempty"`
	Discovered *Discovered   `json:"discovered,omitempty"`
}

// RelayNotes reads the daemon's notes from an archive (`archiver relays`
// shows them).
func RelayNotes(store *rawstore.Store) (map[string]RelayNote, error) {
	recs, err := loadNotes[sched.Record](store, noteSchedule)
	if err != nil {
		return nil, err
	}
	found, err := loadNotes[Discovered](store, noteDiscovered)
	if err != nil {
		return nil, err
	}
	out := make(map[string]RelayNote, len(recs))
	for u, r := range recs {
		out[u] = RelayNote{Schedule: &r}
	}
	for u, f := range found {
		n := out[u]
		n.Discovered = &f
		out[u] = n
	}
	return out, nil
}

// loadNotes reads the notes of one kind, decoded from JSON; a note that
// does not decode (written by another version) is left out.
func loadNotes[T any](store *rawstore.Store, kind byte) (map[string]T, error) {
	raw, err := store.Notes(kind)
	if err != nil {
		return nil, err
	}
	out := make(map[string]T, len(raw))
	for u, b := range raw {
		var v T
		if json.Unmarshal(b, &v) == nil {
			out[u] = v
		}
	}
	return out, nil
}

// summarize logs the scheduler's failures once per summaryEvery: one
// line with the counts by reason, not a warning per dial; and once more
// when ctx ends (every relay run has stopped), so that the failures since
// the last line are not lost at shutdown.
func (d *Daemon) summarize(ctx context.Context) {
	flush := func() {
		f := d.sched.TakeFailures()
		if len(f) == 0 {
			return
		}
		total := 0
		reasons := make([]string, 0, len(f))
		for r, n := range f {
			total += n
			reasons = append(reasons, fmt.Sprintf("%d %s", n, r))
		}
		sort.Strings(reasons)
		c := d.sched.Counts()
		d.log.Warn("relays failed; backing off", zap.Int("failures", total), zap.Duration("in", summaryEvery),
			zap.Strings("by_reason", reasons), zap.Int("backoff", c[sched.StateBackoff]), zap.Int("active", c[sched.StateActive]))
	}
	every(ctx, summaryEvery, flush)
	flush()
}

// registerSchedMetrics exports the relays by scheduling state: one series
// per state, whatever the number of relays.
func (d *Daemon) registerSchedMetrics(reg prometheus.Registerer) {
	for _, st := range sched.States {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "archiver_relays", Help: "Relays by scheduling state (due, probing, active, backoff, done).",
			ConstLabels: prometheus.Labels{"state": st},
		}, func() float64 { return float64(d.sched.Counts()[st]) }))
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "archiver_relays_discovered", Help: "Relays discovery added.",
	}, func() float64 {
		d.mu.Lock()
		defer d.mu.Unlock()
		return float64(d.nDiscovered)
	}))
}

// addRelayLocked creates a relay's loop and hands it to the scheduler
// with its persisted record. Caller holds d.mu.
func (d *Daemon) addRelayLocked(rc config.Relay, found *Discovered) {
	if _, ok := d.relays[rc.URL]; ok {
		return
	}
	l := &relayLoop{d: d, cfg: rc, found: found, log: d.log.With(zap.String("relay", rc.URL)), state: StateBackfill}
	d.relays[rc.URL] = l
	if found != nil {
		d.nDiscovered++
	}
	d.sched.Add(rc.URL, d.saved[rc.URL])
	delete(d.saved, rc.URL) // the scheduler owns it now
}
