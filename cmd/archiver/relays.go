package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nostr-archiver/archiver/daemon"
	"github.com/nostr-archiver/archiver/discover"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/importer"
	"github.com/nostr-archiver/archiver/status"
)

// maxDiscovered bounds the distinct URLs `relays` collects from events.
const maxDiscovered = 100_000

// knownRelay is one line of `archiver relays`.
type knownRelay struct {
	URL string `json:"url"`
	// State: the last crawl's finish, "never crawled" for a relay only
	// found in events.
	State      string `json:"state"`
	Events     int64  `json:"events"` // events this relay served first
	LastFinish string `json:"last_finish,omitempty"`
	// Found: how events name it (nip65, contacts, nip66, hint), if they do.
	Found *discover.Candidate `json:"found,omitempty"`
	// Daemon: what `archiver run` keeps on it: its backoff (failures,
	// next dial, last error, last time it was up) and, for a relay
	// discovery added, the event that named it.
	Daemon *daemon.RelayNote `json:"daemon,omitempty"`
}

func runRelays(args []string) int {
	fs := flag.NewFlagSet("relays", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `Usage: archiver relays [--data DIR] [--json]

Lists every relay the archive knows: those crawled (with the last crawl's
finish and the events each served first), those archiver run dialed and
backs off (failures, last error, next dial) or discovered (from which
event), and those its valid events name (NIP-65 relay lists, contact
lists, NIP-66 monitor events, relay hints in e/p/a tags), most named first. Private targets (loopback, private
addresses, .local, .onion) are left out.`)
		fs.PrintDefaults()
	}
	c := common{access: accessReadOnly}
	asJSON := fs.Bool("json", false, "print JSON")
	c.register(fs)
	_, store, code := c.open(fs, args)
	if store == nil {
		return code
	}
	defer store.Close()
	rep, err := status.Collect(store)
	if err != nil {
		return fail("relays", err)
	}
	front := discover.NewFrontier(maxDiscovered)
	err = store.ForEachValid(func(_ [32]byte, raw []byte) error {
		if e, err := event.Parse(raw); err == nil {
			front.Add(e)
		}
		return nil
	})
	if err != nil {
		return fail("relays", err)
	}
	var out []knownRelay
	byURL := map[string]int{}
	for _, r := range rep.Relays {
		if strings.HasPrefix(r.URL, importer.SourcePrefix) {
			continue
		}
		k := knownRelay{URL: r.URL, State: r.Finish, Events: r.Counters["new"]}
		if k.State == "" {
			k.State = "crawling"
		}
		if r.FinishedAt > 0 {
			k.LastFinish = time.Unix(r.FinishedAt, 0).UTC().Format(time.RFC3339)
		}
		byURL[r.URL] = len(out)
		out = append(out, k)
	}
	notes, err := daemon.RelayNotes(store)
	if err != nil {
		return fail("relays", err)
	}
	for _, u := range slices.Sorted(maps.Keys(notes)) {
		if _, ok := byURL[u]; !ok { // never crawled: dead, refusing, or not dialed yet
			byURL[u] = len(out)
			out = append(out, knownRelay{URL: u, State: "never crawled"})
		}
		n := notes[u]
		out[byURL[u]].Daemon = &n
		if s := n.Schedule; s != nil && s.Failures > 0 {
			out[byURL[u]].State = "failing"
		}
	}
	for _, cand := range front.List() {
		cand := cand
		if i, ok := byURL[cand.URL]; ok {
			out[i].Found = &cand
			continue
		}
		out = append(out, knownRelay{URL: cand.URL, State: "never crawled", Found: &cand})
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
		return 0
	}
	for _, k := range out {
		found := ""
		if k.Found != nil {
			var hows []string
			for h, n := range k.Found.How {
				hows = append(hows, fmt.Sprintf("%s %d", h, n))
			}
			sort.Strings(hows)
			found = "named by " + strings.Join(hows, ", ")
		}
		if n := k.Daemon; n != nil && n.Schedule != nil && n.Schedule.Failures > 0 {
			found = strings.TrimSpace(fmt.Sprintf("%s; %d failures (%s), next dial %s", found, n.Schedule.Failures,
				n.Schedule.LastErr, time.UnixMilli(n.Schedule.Next).UTC().Format(time.RFC3339)))
		}
		if n := k.Daemon; n != nil && n.Discovered != nil {
			found = strings.TrimSpace(fmt.Sprintf("%s; discovered (%s) from event %s", found, n.Discovered.How, n.Discovered.From))
		}
		fmt.Printf("%-40s %-16s %8d  %s\n", k.URL, k.State, k.Events, found)
	}
	if n := front.Dropped(); n > 0 {
		fmt.Fprintf(stderr, "%d more URLs named in events were not listed (over %d distinct)\n", n, maxDiscovered)
	}
	return 0
}
