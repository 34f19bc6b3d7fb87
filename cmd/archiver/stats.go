package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"time"

	"strings"

	"github.com/nostr-archiver/archiver/crawl"

	"github.com/nostr-archiver/archiver/importer"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/shard"
	"github.com/nostr-archiver/archiver/status"
	"go.uber.org/zap"
)

func runStats(args []string) int {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	c := common{access: accessReadOnly}
	asJSON := fs.Bool("json", false, "print JSON")
	c.register(fs)
	log, store, code := c.open(fs, args)
	if store == nil {
		return code
	}
	defer store.Close()
	rep, err := status.Collect(store)
	if err != nil {
		log.Error("stats", zap.Error(err))
		return 1
	}
	dels, err := store.Deletions()
	switch {
	case err == nil:
		rep.Deletions = &dels
	case !errors.Is(err, rawstore.ErrDeletionsNotIndexed):
		log.Error("stats: deletion requests", zap.Error(err))
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return 0
	}
	fmt.Printf("events   %d\nvalid    %d\ninvalid  %d\npending  %d\ndups     %d\n", rep.Events, rep.Valid, rep.Invalid, rep.Pending, rep.Duplicates)
	if rep.Deletions != nil {
		fmt.Printf("deletion requests %d, naming %d events of their own author (recorded, not applied)\n", dels.Requests, dels.Deleted)
	} else {
		fmt.Println("deletion requests: not indexed yet (archiver reprocess --index)")
	}
	if !store.SightingIndexReady() {
		fmt.Println("sighting index: not built yet (archiver reprocess --index; a crawl's audit reads the whole archive without it)")
	}
	reasons := make([]string, 0, len(rep.InvalidCopies))
	for r := range rep.InvalidCopies {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		fmt.Printf("  invalid copies, %s: %d\n", r, rep.InvalidCopies[r])
	}
	for _, r := range rep.Relays {
		if strings.HasPrefix(r.URL, importer.SourcePrefix) {
			fmt.Printf("\n%s\n  new events %d, copies %d, lines quarantined %d\n", r.URL, r.Counters["new"], r.Counters["copies"], r.Counters["malformed"])
			continue
		}
		fmt.Printf("\n%s\n  finish %s %s\n  pages %d, new events %d, copies %d, effective limit %d\n",
			r.URL, r.Finish, r.FinishDetail, r.Pages, r.Counters["new"], r.Counters["copies"], r.EffectiveLimit)
		for _, k := range slices.Sorted(maps.Keys(r.Lies)) {
			fmt.Printf("  caught (%s): the relay %s\n", k, r.Lies[k])
		}
		for _, sp := range r.Repage {
			until := "open"
			if sp.Until != shard.OpenTop {
				until = strconv.FormatInt(sp.Until, 10)
			}
			fmt.Printf("  to page again in windows: [%d, %s]\n", sp.Since, until)
		}
		for _, w := range r.Walls {
			fmt.Printf("  wall at %d: %d events, complete=%v (%s)\n", w.Second, w.Events, w.Complete, w.Method)
			for _, why := range w.Unsplit {
				fmt.Printf("    unproven: %s\n", why)
			}
		}
		for _, c := range crawl.JoinCoverage(r.Coverage) {
			fmt.Printf("  range %s\n", coverageLine(c))
		}
		if r.NIP77 != "" {
			fmt.Printf("  NIP-77 %s", r.NIP77)
			if r.NegCap > 0 {
				fmt.Printf(" (record cap %d)", r.NegCap)
			}
			fmt.Println()
		}
		for _, p := range r.NegProofs {
			until := strconv.FormatInt(p.Until, 10)
			if p.Until < 0 {
				until = "no bound"
			}
			fmt.Printf("  proven complete by NIP-77 over [%d, %s] at %s\n", p.Since, until, time.Unix(p.At, 0).UTC().Format(time.RFC3339))
		}
	}
	return 0
}

// coverageLine shows how one range of a relay was proven held, or why not.
func coverageLine(c crawl.RangeCoverage) string {
	until := "open"
	if c.Until != 0 {
		until = strconv.FormatInt(c.Until, 10)
	}
	line := fmt.Sprintf("[%d, %s]: %s, held %d", c.Since, until, c.Proof, c.Held)
	if c.Proof == crawl.ProofCount || c.Proof == crawl.ProofUnproven && c.Count > 0 {
		line += fmt.Sprintf(", relay COUNT %d", c.Count)
	}
	if c.Repaged > 0 {
		line += fmt.Sprintf(", paged again %d times", c.Repaged)
	}
	if c.Why != "" {
		line += " (" + c.Why + ")"
	}
	return line
}
