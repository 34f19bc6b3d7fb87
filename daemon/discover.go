package daemon

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/discover"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/rawstore"
	"go.uber.org/zap"
)

// onJudged feeds discovery from the verify pool: the relay URLs that
// valid events name become relays to archive, when [discover] is on.
func (d *Daemon) onJudged(items []rawstore.Pending, vs []rawstore.Verdict) {
	for i := range items {
		// Most events name no relay: a byte search skips them unparsed.
		if !vs[i].Valid || !bytes.Contains(items[i].Raw, []byte("ws")) {
			continue
		}
		e, err := event.Parse(items[i].Raw)
		if err != nil {
			continue
		}
		for _, f := range discover.ExtractAll(e) {
			d.discovered(f, e)
		}
	}
}

// discovered adds one URL an event named, unless it is known, refused by
// the allow and deny lists or as a private target, or over max_relays.
func (d *Daemon) discovered(f discover.Found, e *event.Event) {
	dc := d.cfg.Discover
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, known := d.relays[f.URL]; known || d.swept[f.URL] || d.runCtx == nil || d.runCtx.Err() != nil {
		return
	}
	if !dc.Admits(hostOf(f.URL)) || !dc.AllowPrivate && discover.Private(f.URL) {
		d.refusedDiscoveries++
		return
	}
	if d.nDiscovered >= dc.MaxRelays {
		d.refusedDiscoveries++
		return
	}
	found := &Discovered{How: f.How, From: hex.EncodeToString(e.ID[:]), At: time.Now().Unix()}
	b, _ := json.Marshal(found)
	d.notes.put(noteDiscovered, f.URL, b)
	d.log.Debug("relay discovered", zap.String("relay", f.URL), zap.String("how", f.How), zap.String("event", found.From))
	d.adoptLocked(f.URL, found)
}

// adoptLocked archives a discovered relay: on this node, or, in a fleet,
// through a sweep job on the shared queue. Caller holds d.mu.
func (d *Daemon) adoptLocked(u string, found *Discovered) {
	if d.sweep != nil {
		d.sweepLocked(u, found)
		return
	}
	d.addRelayLocked(discoveredRelay(u), found)
}

// discoveredRelay is the job of a discovered relay: a [[relay]] with only
// its url set.
func discoveredRelay(u string) config.Relay {
	rc := config.DefaultRelay()
	rc.URL = u
	return rc
}

// startDiscoveredLocked resumes the relays earlier runs discovered that
// the lists still admit. Caller holds d.mu.
func (d *Daemon) startDiscoveredLocked() {
	dc := d.cfg.Discover
	for u, f := range d.frontier {
		if d.nDiscovered >= dc.MaxRelays {
			return
		}
		if dc.Admits(hostOf(u)) && (dc.AllowPrivate || !discover.Private(u)) {
			// In a fleet, submitted again: the queue's dedup, or the job's
			// record, drops it if it was swept already.
			d.adoptLocked(u, &f)
		}
	}
}
