package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/rawstore"
)

func runShow(args []string) int {
	fs := flag.NewFlagSet("show", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `Usage: archiver show [--data DIR] [--json] EVENT_ID

Shows every copy of an event the archive holds, the verdict on each and
why, every relay (or import) that served it, the first one first, when
each first did, and the deletion requests (kind 5) that name it: recorded,
never applied.`)
		fs.PrintDefaults()
	}
	c := common{access: accessReadOnly}
	asJSON := fs.Bool("json", false, "print JSON")
	c.register(fs)
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if len(rest) != 1 {
		return usageError("show", errors.New("want one EVENT_ID (64 hex characters)"))
	}
	var id [32]byte
	if b, err := hex.DecodeString(rest[0]); err != nil || len(b) != 32 {
		return usageError("show", fmt.Errorf("%q is not an event id (64 hex characters)", rest[0]))
	} else {
		copy(id[:], b)
	}
	log, err := c.logger()
	if err != nil {
		return usageError("show", err)
	}
	store, err := c.openStore(log)
	if err != nil {
		return fail("show", openError(c.data, err))
	}
	defer store.Close()
	h, err := store.Lookup(id)
	if err != nil {
		return fail("show", err)
	}
	if h.Primary == nil && len(h.Quarantined) == 0 {
		return fail("show", fmt.Errorf("%x is not in the archive %s", id, c.data))
	}
	dels, delErr := deletionsOf(store, h)
	if delErr != nil && !errors.Is(delErr, rawstore.ErrDeletionsNotIndexed) {
		return fail("show", fmt.Errorf("deletion requests naming %x: %w", id, delErr))
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(showJSON(store, id, h, dels))
		return 0
	}
	fmt.Printf("id       %x\n", id)
	if h.Primary != nil {
		verdict := h.Verdict
		if h.Reason != "" {
			verdict += " (" + h.Reason + ")"
		}
		var src []string
		for i, r := range h.Sources {
			src = append(src, fmt.Sprintf("%s (first seen %s)", store.RelayURL(r), seenText(h.Seen[i])))
		}
		fmt.Printf("verdict  %s\nserved   %s\ncopy     %s\n", verdict, strings.Join(src, ", "), h.Primary)
	} else {
		fmt.Println("verdict  no valid copy held")
	}
	for _, a := range h.Alternates {
		fmt.Printf("other copy from %s (first seen %s), pending: %s\n", store.RelayURL(a.Relay), seenText(a.Seen), a.Raw)
	}
	for _, q := range h.Quarantined {
		fmt.Printf("quarantined copy from %s (%s): %s\n", store.RelayURL(q.Relay), q.Reason, q.Raw)
	}
	if errors.Is(delErr, rawstore.ErrDeletionsNotIndexed) {
		fmt.Println("deletion requests: not indexed yet (archiver reprocess --index)")
	}
	for _, d := range dels {
		why := "honoured by relays (kept here: the archive applies no deletion)"
		if !d.Honoured {
			why = d.Why
		}
		fmt.Printf("deletion request %x by %x (%s tag, created_at %d): %s\n", d.ID, d.PubKey, d.Tag, d.CreatedAt, why)
	}
	return 0
}

// deletionsOf returns the deletion requests naming h's valid copy.
func deletionsOf(store *rawstore.Store, h rawstore.Held) ([]rawstore.DeletionRequest, error) {
	if h.Verdict != "valid" {
		return nil, nil
	}
	e, err := event.Parse(h.Primary)
	if err != nil {
		return nil, err
	}
	return store.DeletionRequests(e)
}

// seenText is a first-seen time for a person.
func seenText(unix int64) string {
	if unix == 0 {
		return "unknown"
	}
	return time.Unix(unix, 0).UTC().Format(time.RFC3339)
}

// shownCopy is one copy in `show --json`.
type shownCopy struct {
	Source string `json:"source"`
	// FirstSeen is when the copy was first received (unix seconds),
	// absent if unknown or (a quarantined copy) not kept.
	FirstSeen int64  `json:"first_seen,omitempty"`
	Verdict   string `json:"verdict"`
	Reason    string `json:"reason,omitempty"`
	Raw       string `json:"raw"` // the bytes exactly as received
}

// shownSighting is one source in `show --json`.
type shownSighting struct {
	Source    string `json:"source"`
	FirstSeen int64  `json:"first_seen,omitempty"` // unix seconds; absent if unknown
}

// shownDeletion is one deletion request in `show --json`.
type shownDeletion struct {
	ID        string `json:"id"`
	PubKey    string `json:"pubkey"`
	CreatedAt int64  `json:"created_at"`
	Tag       string `json:"tag"`
	Honoured  bool   `json:"honoured_by_relays"`
	Why       string `json:"why_not,omitempty"`
}

func showJSON(store *rawstore.Store, id [32]byte, h rawstore.Held, dels []rawstore.DeletionRequest) any {
	cp := func(relay uint32, seen int64, verdict, reason string, raw []byte) shownCopy {
		return shownCopy{Source: store.RelayURL(relay), FirstSeen: seen, Verdict: verdict, Reason: reason, Raw: string(raw)}
	}
	out := struct {
		ID        string          `json:"id"`
		Sources   []string        `json:"sources"`
		Sightings []shownSighting `json:"sightings"`
		Copies    []shownCopy     `json:"copies"`
		Deletions []shownDeletion `json:"deletion_requests"`
	}{ID: hex.EncodeToString(id[:]), Sources: []string{}, Sightings: []shownSighting{}, Copies: []shownCopy{}, Deletions: []shownDeletion{}}
	for i, r := range h.Sources {
		out.Sources = append(out.Sources, store.RelayURL(r))
		out.Sightings = append(out.Sightings, shownSighting{store.RelayURL(r), h.Seen[i]})
	}
	if h.Primary != nil {
		var seen int64
		if len(h.Seen) > 0 {
			seen = h.Seen[0]
		}
		out.Copies = append(out.Copies, cp(h.PrimaryRelay, seen, h.Verdict, h.Reason, h.Primary))
	}
	for _, a := range h.Alternates {
		out.Copies = append(out.Copies, cp(a.Relay, a.Seen, "pending", "", a.Raw))
	}
	for _, q := range h.Quarantined {
		out.Copies = append(out.Copies, cp(q.Relay, 0, "invalid", q.Reason, q.Raw))
	}
	for _, d := range dels {
		out.Deletions = append(out.Deletions, shownDeletion{hex.EncodeToString(d.ID[:]), hex.EncodeToString(d.PubKey[:]), d.CreatedAt, d.Tag, d.Honoured, d.Why})
	}
	return out
}
