package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/lazyparse"
	"github.com/nostr-archiver/archiver/relayconn"
	"go.uber.org/zap"
)

// runSync reconciles the archive with each relay over NIP-77 and fetches
// only what the archive lacks. Exit 0 only when every relay's range is
// proven held; 1 names why not; 2 is a usage error.
func runSync(args []string) int {
	fs := flag.NewFlagSet("sync", flag.ContinueOnError)
	d := crawl.DefaultOptions()
	var (
		c        common
		since    = fs.String("since", "", "oldest created_at to reconcile (unix seconds, RFC 3339, YYYY-MM-DD, or a duration ago like 30d); default: everything")
		until    = fs.String("until", "", "newest created_at to reconcile; default: no bound (future-dated events included)")
		timeout  = fs.Duration("timeout", d.PageTimeout, "give up on an answer (NEG-MSG or a page of ids) after this long")
		noVerify = fs.Bool("no-verify", false, "store events without verifying them (run `archiver reprocess` later)")
	)
	c.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: archiver sync [flags] RELAY_URL...\n\nReconciles the archive with each relay over NIP-77 (negentropy) and fetches only\nthe events the archive lacks. Exits 0 only when everything each relay has in the\nrange is held. A relay that refuses NIP-77 is reported: crawl it instead.")
		fs.PrintDefaults()
	}
	args, err := parseInterspersed(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, "archiver sync: no relay given")
		fs.Usage()
		return 2
	}
	relays := make([]string, len(args))
	for i, a := range args {
		if relays[i], err = crawl.NormalizeURL(a); err != nil {
			return usageError("sync", err)
		}
	}
	now := time.Now()
	// A relay without a negentropy frame limit answers a first sync with
	// every id at once (64 hex bytes each): room for 500k of them; past
	// that, Sync redials with smaller windows.
	o := crawl.SyncOptions{Until: -1, Idle: *timeout,
		Dial: relayconn.DialOptions{MaxFrame: max(d.MaxFrame, 32<<20), DialTimeout: d.DialTimeout, PingInterval: 30 * time.Second}}
	if o.Since, err = parseTime(*since, now); err != nil {
		return usageError("--since", err)
	}
	if *until != "" {
		if o.Until, err = parseTime(*until, now); err != nil {
			return usageError("--until", err)
		}
		if o.Until < o.Since {
			return usageError("--until", fmt.Errorf("%d is before --since %d", o.Until, o.Since))
		}
	}
	if *timeout <= 0 {
		return usageError("--timeout", fmt.Errorf("%v is not positive", *timeout))
	}
	log, err := c.logger()
	if err != nil {
		return usageError("sync", err)
	}
	defer log.Sync() //nolint:errcheck // stderr cannot be synced
	ctx, stop := signalContext()
	defer stop()
	store, err := c.openStore(log)
	if err != nil {
		return fail("sync", fmt.Errorf("cannot open archive %s: %w", c.data, err))
	}
	defer func() {
		if err := store.Close(); err != nil {
			fail("sync", fmt.Errorf("closing archive %s: %w", c.data, err))
		}
	}()
	o.Store, o.Logger = store, log
	code := 0
	for _, relay := range relays {
		r := crawl.Sync(ctx, o, relay)
		fmt.Fprintf(stderr, "%s: %s: %d windows, %d round trips, needed %d, fetched %d, archive-only %d, received %d B of NIP-77 messages (hex) and %d B of EVENT frames",
			r.Relay, r.Outcome, r.Windows, r.Rounds, r.Needed, r.Fetched, r.Have, r.NegBytes, r.FetchByte)
		if r.Detail != "" {
			fmt.Fprintf(stderr, ": %s", r.Detail)
		}
		fmt.Fprintln(stderr)
		if r.Outcome != crawl.SyncComplete {
			code = 1
		}
	}
	if !*noVerify && ctx.Err() == nil {
		pool, err := lazyparse.New(lazyparse.Options{Store: store, Logger: log})
		if err == nil {
			_, err = pool.Drain(ctx)
		}
		if err != nil {
			log.Error("verify", zap.Error(err))
			code = 1
		}
	}
	summary(stderr, store, c.data)
	return storeVerdict("sync", code, store)
}
