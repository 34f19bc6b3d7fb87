package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/nostr-archiver/archiver/importer"
	"github.com/nostr-archiver/archiver/status"
	"go.uber.org/zap"
)

func runStats(args []string) int {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	var c common
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
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return 0
	}
	fmt.Printf("events   %d\nvalid    %d\ninvalid  %d\npending  %d\ndups     %d\n", rep.Events, rep.Valid, rep.Invalid, rep.Pending, rep.Duplicates)
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
		for _, w := range r.Walls {
			fmt.Printf("  wall at %d: %d events, complete=%v (%s)\n", w.Second, w.Events, w.Complete, w.Method)
		}
	}
	return 0
}
