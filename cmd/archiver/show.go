package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/nostr-archiver/archiver/rawstore"
)

func runShow(args []string) int {
	fs := flag.NewFlagSet("show", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `Usage: archiver show [--data DIR] [--json] EVENT_ID

Shows every copy of an event the archive holds, the verdict on each and
why, and every relay (or import) that served it, the first one first.`)
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
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(showJSON(store, id, h))
		return 0
	}
	fmt.Printf("id       %x\n", id)
	if h.Primary != nil {
		verdict := h.Verdict
		if h.Reason != "" {
			verdict += " (" + h.Reason + ")"
		}
		var src []string
		for _, r := range h.Sources {
			src = append(src, store.RelayURL(r))
		}
		fmt.Printf("verdict  %s\nserved   %s\ncopy     %s\n", verdict, strings.Join(src, ", "), h.Primary)
	} else {
		fmt.Println("verdict  no valid copy held")
	}
	for _, a := range h.Alternates {
		fmt.Printf("other copy from %s, pending: %s\n", store.RelayURL(a.Relay), a.Raw)
	}
	for _, q := range h.Quarantined {
		fmt.Printf("quarantined copy from %s (%s): %s\n", store.RelayURL(q.Relay), q.Reason, q.Raw)
	}
	return 0
}

// shownCopy is one copy in `show --json`.
type shownCopy struct {
	Source  string `json:"source"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
	Raw     string `json:"raw"` // the bytes exactly as received
}

func showJSON(store *rawstore.Store, id [32]byte, h rawstore.Held) any {
	cp := func(relay uint32, verdict, reason string, raw []byte) shownCopy {
		return shownCopy{Source: store.RelayURL(relay), Verdict: verdict, Reason: reason, Raw: string(raw)}
	}
	out := struct {
		ID      string      `json:"id"`
		Sources []string    `json:"sources"`
		Copies  []shownCopy `json:"copies"`
	}{ID: hex.EncodeToString(id[:]), Sources: []string{}, Copies: []shownCopy{}}
	for _, r := range h.Sources {
		out.Sources = append(out.Sources, store.RelayURL(r))
	}
	if h.Primary != nil {
		out.Copies = append(out.Copies, cp(h.PrimaryRelay, h.Verdict, h.Reason, h.Primary))
	}
	for _, a := range h.Alternates {
		out.Copies = append(out.Copies, cp(a.Relay, "pending", "", a.Raw))
	}
	for _, q := range h.Quarantined {
		out.Copies = append(out.Copies, cp(q.Relay, "invalid", q.Reason, q.Raw))
	}
	return out
}
