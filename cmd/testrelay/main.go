// Command testrelay serves a generated (or JSONL) corpus of Nostr events
// over WebSocket until SIGINT or SIGTERM, with testrelay's fault knobs, so
// benchmarks can run the relay in its own process. Its first line of
// standard output is the relay's URL.
//
//	testrelay -listen 127.0.0.1:7447 -events 1000000 -seed 1 -fixture-cache ~/.cache/testrelay
//	testrelay -jsonl events.jsonl -max-limit 5000 -auth
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nostr-archiver/archiver/testrelay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "testrelay:", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("testrelay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o  testrelay.Options
		fo testrelay.FixtureOptions

		jsonl, infoFile, truth, truthBad string
		faults                           int
	)
	fs.StringVar(&o.Addr, "listen", "127.0.0.1:7447", "TCP address to listen on")
	fs.IntVar(&fo.Events, "events", 10000, "ordinary valid events to generate")
	fs.Uint64Var(&fo.Seed, "seed", 1, "fixture seed")
	fs.IntVar(&fo.Authors, "authors", 0, "fixture authors (0: default)")
	fs.StringVar(&fo.CacheDir, "fixture-cache", "", "directory caching signed fixtures across runs (empty: no cache)")
	fs.IntVar(&fo.Wall, "wall", 0, "events sharing one created_at second")
	fs.IntVar(&fo.UnsplittableWall, "unsplittable-wall", 0, "events of one author and kind sharing another second")
	fs.IntVar(&faults, "faults", 0, "this many of each fault: forged and random ids, bad sigs and pubkeys, malformed objects and frames, duplicates, lookalikes, varied serializations")
	fs.StringVar(&jsonl, "jsonl", "", "serve the events of this JSONL file instead of a generated corpus")
	fs.StringVar(&truth, "truth", "", "write the valid events' canonical lines, sorted by id, to this file")
	fs.StringVar(&truthBad, "truth-bad", "", `write {"id","reason","frame"} per bad copy to this file`)

	fs.StringVar(&infoFile, "info", "", "serve this file verbatim as the NIP-11 document")
	fs.BoolVar(&o.NoInfo, "no-info", false, "answer NIP-11 requests with 404")
	fs.IntVar(&o.MaxLimit, "max-limit", 0, "clamp filter limits (0: 500, negative: no clamp)")
	fs.IntVar(&o.DefaultLimit, "default-limit", 0, "limit of a filter without one (0: 500, negative: unlimited)")
	fs.BoolVar(&o.IgnoreUntil, "ignore-until", false, "serve filters as if they had no until")
	fs.StringVar(&o.PageOrder, "page-order", "", `which events a clamped page holds: "oldest" (a relay sorting ascending), "id" (lowest ids), or "" (newest, as NIP-01 says)`)
	fs.Int64Var(&o.OrderedPages, "ordered-pages", 0, "with -page-order, serve the first N REQs newest-first and only later ones in that order")
	fs.IntVar(&o.ExtraOutOfRange, "extra-out-of-range", 0, "add this many events outside [since, until] on each side")
	fs.IntVar(&o.MaxSubsPerConn, "max-subs", 0, "open subscriptions per connection; over it a REQ gets only a NOTICE (0: no cap)")
	fs.Float64Var(&o.RateLimit, "rate", 0, "REQs per second per connection (0: no limit)")
	fs.IntVar(&o.RateBurst, "rate-burst", 0, "token bucket size (0: rate rounded up)")
	fs.BoolVar(&o.RatePerIP, "rate-per-ip", false, "one token bucket per IP instead of per connection")
	fs.BoolVar(&o.ErrorPrefix, "error-prefix", false, `prefix CLOSED reasons with "ERROR: " as strfry does`)
	fs.IntVar(&o.MaxConnsPerIP, "max-conns-per-ip", 0, "refuse more WebSocket upgrades per IP with HTTP 429 (0: no cap)")
	fs.IntVar(&o.DropEvery, "drop-every", 0, "close the TCP connection after this many EVENT frames on it (0: never)")
	fs.IntVar(&o.NoticeOnlyEvery, "notice-every", 0, "answer every Nth REQ with only a NOTICE (0: never)")
	fs.BoolVar(&o.AuthRequired, "auth", false, "require NIP-42 AUTH before serving REQ and COUNT")
	fs.BoolVar(&o.SupportCount, "count", false, "answer NIP-45 COUNT")
	fs.IntVar(&o.CountNoticeEvery, "count-notice-every", 0, "answer every Nth COUNT with only a NOTICE (0: never)")
	fs.IntVar(&o.CountCap, "count-cap", 0, `answer COUNT with at most N, "approximate": true when capped (0: no cap)`)
	fs.BoolVar(&o.CountCapSilent, "count-cap-silent", false, `with -count-cap, leave a capped COUNT unmarked (a COUNT that undercounts)`)
	fs.BoolVar(&o.CountApproximate, "count-approximate", false, `mark every COUNT "approximate": true, as a relay counting with HyperLogLog does`)
	fs.DurationVar(&o.Latency, "latency", 0, "delay before each page (per connection, -page-workers pages at once)")
	fs.IntVar(&o.PageWorkers, "page-workers", 1, "REQs of one connection served concurrently under -latency")
	fs.Float64Var(&o.Capacity, "capacity", 0, "events per second the relay serves across all connections (0: no cap)")
	fs.BoolVar(&o.SendLimitsFrame, "limits-frame", false, `send a ["LIMITS",{...}] frame on connect`)
	fs.IntVar(&o.MaxMessageLength, "max-message-length", 0, "drop a connection whose client frame is longer (0: no limit)")
	fs.IntVar(&o.DuplicateEvery, "duplicate-every", 0, "send every Nth event of a page twice (0: never)")
	fs.BoolVar(&o.DuplicateInLimit, "duplicate-in-limit", false, "duplicate frames count toward the page clamp")
	fs.IntVar(&o.OmitEvery, "omit-every", 0, "silently drop every Nth event from REQ pages; COUNT still counts it (0: never)")
	fs.BoolVar(&o.OmitForever, "omit-forever", false, "with -omit-every, drop the same events every time")
	fs.IntVar(&o.BrokenEvery, "broken-every", 0, "make every event whose id hashes to 0 mod N a dangling index entry that ends a scan with EOSE (0: never)")
	fs.IntVar(&o.SplitStores, "split-stores", 0, "answer each page from N stores, each applying the limit on its own (0 or 1: one store)")
	fs.BoolVar(&o.TiesDescending, "ties-descending", false, "order the events of one second by id descending")
	fs.IntVar(&o.ClosedEvery, "closed-every", 0, `end every Nth page with CLOSED "error: ..." part way through (0: never)`)
	fs.IntVar(&o.FailQueryEvery, "fail-query-every", 0, "answer every Nth REQ with a NOTICE and then an empty EOSE (0: never)")
	fs.IntVar(&o.EOSEFirstEvery, "eose-first-every", 0, "answer every Nth REQ with its EOSE first, then its events (0: never)")
	fs.IntVar(&o.EOSEFirstRun, "eose-first-run", 0, "answer that many REQs in a row so from each -eose-first-every-th on (0: 1)")
	fs.DurationVar(&o.EOSEFirstSplit, "eose-first-split", 0, "send all but the first quarter of the events of a REQ answered EOSE first this much later (0: at once)")
	fs.BoolVar(&o.EOSEFirstDropped, "eose-first-dropped", false, "never send the events of a REQ answered EOSE first once the client closed it")
	fs.BoolVar(&o.RejectLimitZero, "reject-limit-zero", false, `close a REQ with a filter of limit 0 ("invalid: limit 0") instead of sending only what is published`)
	fs.IntVar(&fo.Future, "future", 0, "events dated 1 minute to 1 day after the fixture's until")
	fs.IntVar(&fo.FarFuture, "far-future", 0, "events dated in the year 2286")
	fs.IntVar(&fo.HiddenWall, "hidden-wall", 0, "events in one second whose authors a full page of it does not show")
	fs.IntVar(&fo.TagWall, "tag-wall", 0, "events of one author and kind in one second that only a #t split fits in pages")
	fs.BoolVar(&o.NIP77, "nip77", false, "answer NIP-77 negentropy (NEG-OPEN/NEG-MSG/NEG-CLOSE)")
	fs.BoolVar(&o.ListNIP77, "list-nip77", false, "list NIP-77 in NIP-11 even without -nip77 (a relay that claims it and refuses)")
	fs.BoolVar(&o.NegNoticeOnly, "neg-notice-only", false, `answer NEG-* with only ["NOTICE","ERROR: bad msg: negentropy disabled"]`)
	fs.IntVar(&o.NegMaxRecords, "neg-max-records", 0, `refuse a NEG-OPEN matching more events with "blocked: too many records" (0: no cap)`)
	fs.BoolVar(&o.NegCapInReason, "neg-cap-in-reason", false, "name the -neg-max-records cap in the blocked: reason")
	fs.IntVar(&o.NegCut, "neg-cut", 0, "build each NIP-77 set from the filter's newest N events only, silently, as khatru over eventstore's MaxLimit does (0: the whole set)")
	fs.IntVar(&o.NegCloseEvery, "neg-close-every", 0, `answer every Nth NEG-MSG with "closed: idle timeout" (0: never)`)
	fs.DurationVar(&o.NegIdleClose, "neg-idle-close", 0, `close a reconciliation idle this long with "closed: idle timeout" (0: never)`)
	fs.IntVar(&o.NegFrameLimit, "neg-frame-limit", 0, "largest negentropy message the relay sends, bytes (0: no limit, else >= 4096)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if infoFile != "" {
		doc, err := os.ReadFile(infoFile)
		if err != nil {
			return err
		}
		o.Info = doc
	}

	start := time.Now()
	var items []testrelay.Item
	if jsonl != "" {
		f, err := os.Open(jsonl)
		if err != nil {
			return err
		}
		items, err = testrelay.ReadJSONL(f)
		_ = f.Close()
		if err != nil {
			return err
		}
	} else {
		fo.ForgedIDs, fo.RandomIDs, fo.BadSigs, fo.BadPubKeys = faults, faults, faults, faults
		fo.Malformed, fo.MalformedFrames, fo.Duplicates, fo.Lookalikes, fo.Varied = faults, faults, faults, faults, faults
		fx, err := testrelay.Generate(fo)
		if err != nil {
			return err
		}
		if err := writeTruth(fx, truth, truthBad); err != nil {
			return err
		}
		items = fx.Items
	}

	r, err := testrelay.New(o)
	if err != nil {
		return err
	}
	r.Add(items...)
	items = nil
	fmt.Fprintln(stdout, r.URL())
	fmt.Fprintf(stderr, "testrelay: serving %d items at %s (ready in %v)\n", r.Len(), r.URL(), time.Since(start).Round(time.Millisecond))

	<-ctx.Done()
	err = r.Close()
	st, _ := json.Marshal(r.Stats())
	fmt.Fprintf(stderr, "testrelay: stats %s\n", st)
	return err
}

func writeTruth(fx *testrelay.Fixture, valid, bad string) error {
	if valid != "" {
		if err := writeLines(valid, func(w *bufio.Writer) {
			for _, v := range fx.Valid {
				_, _ = w.Write(v.Line)
				_ = w.WriteByte('\n')
			}
		}); err != nil {
			return err
		}
	}
	if bad != "" {
		return writeLines(bad, func(w *bufio.Writer) {
			enc := json.NewEncoder(w)
			for _, b := range fx.Bad {
				_ = enc.Encode(struct {
					ID     string `json:"id"`
					Reason string `json:"reason"`
					Frame  bool   `json:"frame,omitempty"`
				}{b.ID, b.Reason, b.Frame})
			}
		})
	}
	return nil
}

func writeLines(path string, fill func(*bufio.Writer)) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fill(w)
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
