// Package status assembles the archive's report: the store's counters and
// each relay's crawl record. `archiver stats --json` prints it; the
// daemon's /status serves it with each relay's live state added.
package status

import (
	"encoding/json"
	"fmt"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/rawstore"
)

// Report is the archive's state.
type Report struct {
	rawstore.Stats
	Relays []Relay `json:"relays"`
	// Deletions is filled by `archiver stats` (it reads an index; the
	// daemon's frequent reports leave it out).
	Deletions *rawstore.DeletionCounts `json:"deletions,omitempty"`
}

// Relay is one relay's part of the report.
type Relay struct {
	URL      string           `json:"url"`
	Counters map[string]int64 `json:"counters"` // new, duplicates, variants, copies, malformed
	crawl.RelayRecord
}

// Collect reads the report from store.
func Collect(store *rawstore.Store) (*Report, error) {
	st, err := store.Stats()
	if err != nil {
		return nil, err
	}
	rep := &Report{Stats: st}
	rels, err := store.Relays()
	if err != nil {
		return nil, err
	}
	for _, rel := range rels {
		rr := Relay{URL: rel.URL}
		if len(rel.Record) > 0 {
			if err := json.Unmarshal(rel.Record, &rr.RelayRecord); err != nil {
				return nil, fmt.Errorf("relay %s record: %w", rel.URL, err)
			}
		}
		if rr.Counters, err = store.RelayCounters(rel.Index); err != nil {
			return nil, err
		}
		rep.Relays = append(rep.Relays, rr)
	}
	return rep, nil
}
