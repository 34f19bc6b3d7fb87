package discover

import (
	"encoding/hex"
	"slices"
	"strings"

	"github.com/nostr-archiver/archiver/event"
)

// Candidate is one relay URL found in events.
type Candidate struct {
	URL      string         `json:"url"`
	Mentions int            `json:"mentions"` // events that name it
	How      map[string]int `json:"how"`      // mentions by how it was named
	// FirstSeenIn is the id of the first event found naming it.
	FirstSeenIn string `json:"first_seen_in"`
}

// Frontier collects the relay URLs events name, up to a bound on distinct
// URLs (events carry junk: a hostile author can name a million hosts).
type Frontier struct {
	max     int
	relays  map[string]*Candidate
	dropped int
}

// NewFrontier holds at most max distinct URLs.
func NewFrontier(max int) *Frontier {
	return &Frontier{max: max, relays: map[string]*Candidate{}}
}

// Add records the relay URLs e names.
func (f *Frontier) Add(e *event.Event) {
	for _, x := range Extract(e) {
		c := f.relays[x.URL]
		if c == nil {
			if len(f.relays) >= f.max {
				f.dropped++
				continue
			}
			c = &Candidate{URL: x.URL, How: map[string]int{}, FirstSeenIn: hex.EncodeToString(e.ID[:])}
			f.relays[x.URL] = c
		}
		c.Mentions++
		c.How[x.How]++
	}
}

// Dropped counts the URLs left out once the bound was reached.
func (f *Frontier) Dropped() int { return f.dropped }

// List returns the candidates, most mentioned first.
func (f *Frontier) List() []Candidate {
	out := make([]Candidate, 0, len(f.relays))
	for _, c := range f.relays {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Candidate) int {
		if a.Mentions != b.Mentions {
			return b.Mentions - a.Mentions
		}
		return strings.Compare(a.URL, b.URL)
	})
	return out
}
