package daemon

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/nostr-archiver/archiver/sched"
	"github.com/nostr-archiver/archiver/status"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Status is what GET /status answers: `archiver stats --json`, with each
// configured relay's live state, and the disk guard's.
type Status struct {
	*status.Report
	Relays []RelayState `json:"relays"`
	Disk   DiskState    `json:"disk"`
	// Schedule counts the relays by scheduling state (due, probing,
	// active, backoff, done).
	Schedule map[string]int `json:"schedule"`
	// Discovered counts the relays discovery added; Refused the URLs it
	// did not (allow/deny lists, private targets, max_relays).
	Discovered int `json:"discovered"`
	Refused    int `json:"discovery_refused"`
	// UnsavedNotes counts scheduler and discovery records not yet
	// written to the archive (they are, every second).
	UnsavedNotes int `json:"unsaved_notes"`
	// Sweep, in a fleet with discovery, counts the sweep jobs of the
	// relays this node discovered.
	Sweep *SweepState `json:"sweep,omitempty"`
}

// RelayState joins a relay's archive record and its loop's state.
type RelayState struct {
	status.Relay
	RelayStatus
}

// DiskState is the disk guard's view.
type DiskState struct {
	Paused        bool   `json:"paused"`
	FreeBytes     uint64 `json:"free_bytes"`
	MinFreeBytes  uint64 `json:"min_free_bytes"`
	VerifyLoopAge string `json:"verify_loop_age"`
}

// Status collects the current status.
func (d *Daemon) Status() (*Status, error) {
	rep, err := status.Collect(d.store)
	if err != nil {
		return nil, err
	}
	st := &Status{Report: rep, Disk: DiskState{
		Paused: d.guard.Paused(), FreeBytes: d.guard.Free(), MinFreeBytes: uint64(d.cfg.Limits.MinFreeDiskBytes),
		VerifyLoopAge: time.Since(d.pool.Alive()).Round(time.Millisecond).String(),
	}}
	records := map[string]status.Relay{}
	for _, r := range rep.Relays {
		records[r.URL] = r
	}
	scheduled := map[string]sched.Status{}
	for _, s := range d.sched.Statuses() {
		scheduled[s.URL] = s
	}
	st.Schedule, st.UnsavedNotes = d.sched.Counts(), d.notes.unsaved()
	if d.sweep != nil {
		st.Sweep = d.sweep.state()
	}
	d.mu.Lock()
	st.Discovered, st.Refused = d.nDiscovered, d.refusedDiscoveries
	for url, l := range d.relays {
		rec, ok := records[url]
		if !ok {
			rec = status.Relay{URL: url}
		}
		st.Relays = append(st.Relays, RelayState{Relay: rec, RelayStatus: l.status(scheduled[url])})
	}
	d.mu.Unlock()
	sort.Slice(st.Relays, func(i, j int) bool { return st.Relays[i].Relay.URL < st.Relays[j].Relay.URL })
	return st, nil
}

func (d *Daemon) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{ErrorLog: zapErrorLog{d}}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case d.guard.Paused():
			http.Error(w, "paused: free disk space under the floor", http.StatusServiceUnavailable)
		case time.Since(d.pool.Alive()) > 10*time.Second:
			http.Error(w, "verify loop stuck", http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte("ok\n"))
		}
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		st, err := d.Status()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	})
	return mux
}

type zapErrorLog struct{ d *Daemon }

func (z zapErrorLog) Println(v ...any) { z.d.log.Sugar().Error(v...) }
