package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/lazyparse"
	"go.uber.org/zap"
)

func runCrawl(args []string) int {
	fs := flag.NewFlagSet("crawl", flag.ContinueOnError)
	var (
		c        common
		since    = fs.String("since", "", "oldest created_at to archive (unix seconds, RFC 3339, YYYY-MM-DD, or a duration ago like 30d); default: everything")
		until    = fs.String("until", "", "newest created_at to archive; default: now")
		noVerify = fs.Bool("no-verify", false, "store events without verifying them (run `archiver reprocess` later)")
		limit    = fs.Int("limit", 0, "REQ page limit; default: the relay's NIP-11 max_limit, else 500")
		inflight = fs.Int("inflight", 8, "most REQs in flight per relay connection (the controller starts lower and learns)")
		conns    = fs.Int("conns", 4, "most connections per relay")
		total    = fs.Int("max-conns", 64, "most connections across all relays")
		startC   = fs.Int("start-conns", 1, "connections per relay before the controller learns more")
		startR   = fs.Int("start-inflight", 4, "REQs in flight per connection before the controller learns more")
		shards   = fs.Int("shards", 32, "initial created_at shards of a relay's job (idle workers split the largest)")
		workers  = fs.Int("verify-workers", runtime.GOMAXPROCS(0), "signature verification workers")
		kinds    = fs.String("kinds", "", "only these kinds, comma-separated")
		authors  = fs.String("authors", "", "only these authors: hex pubkeys, comma-separated (a crawl's cursors belong to its range and filter)")
		timeout  = fs.Duration("page-timeout", 15*time.Second, "give up on a page after this long without a frame")
	)
	c.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: archiver crawl [flags] RELAY_URL...\n\nArchives each relay once and exits 0 when every relay was drained.")
		fs.PrintDefaults()
	}
	relays, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(relays) == 0 {
		fmt.Fprintln(os.Stderr, "archiver crawl: no relay given")
		fs.Usage()
		return 2
	}
	now := time.Now()
	opts := crawl.Options{
		PageLimit: *limit, PageTimeout: *timeout, Shards: *shards,
		MaxInFlightPerConn: *inflight, MaxConnsPerRelay: *conns, MaxConns: *total,
		StartConns: *startC, StartInFlight: *startR,
	}
	if opts.Since, err = parseTime(*since, now); err != nil {
		return usageError("--since", err)
	}
	if opts.Until, err = parseTime(*until, now); err != nil {
		return usageError("--until", err)
	}
	if opts.Kinds, err = parseKinds(*kinds); err != nil {
		return usageError("--kinds", err)
	}
	if opts.Authors, err = parseAuthors(*authors); err != nil {
		return usageError("--authors", err)
	}
	log, err := c.logger()
	if err != nil {
		return usageError("--log-level", err)
	}
	defer log.Sync() //nolint:errcheck // stderr cannot be synced

	stopProfile, err := c.profile()
	if err != nil {
		return usageError("--cpuprofile", err)
	}
	defer stopProfile()
	ctx, stop := signalContext()
	defer stop()
	if !*noVerify {
		c.hotBytes = hotBytes
	}
	store, err := c.openStore(log)
	if err != nil {
		log.Error("cannot open archive", zap.String("dir", c.data), zap.Error(err))
		return 1
	}
	// Shutdown order: the crawl stops first (its last batches are
	// committed), then the verify pool finishes its batch, then the store
	// closes (flushing Pebble).
	defer func() {
		if err := store.Close(); err != nil {
			log.Error("closing archive", zap.Error(err))
		}
	}()

	var pool *lazyparse.Pool
	poolCtx, stopPool := context.WithCancel(ctx)
	defer stopPool()
	var poolWG sync.WaitGroup
	if !*noVerify {
		pool, err = lazyparse.New(lazyparse.Options{Store: store, Workers: *workers, Logger: log})
		if err != nil {
			log.Error("verify pool", zap.Error(err))
			return 1
		}
		poolWG.Add(1)
		go func() {
			defer poolWG.Done()
			if err := pool.Run(poolCtx); err != nil {
				log.Error("verify pool stopped", zap.Error(err))
			}
		}()
		opts.OnCommit = pool.Notify
	}
	opts.Store, opts.Logger = store, log
	crawler, err := crawl.New(opts)
	if err != nil {
		stopPool()
		poolWG.Wait()
		return usageError("crawl", err)
	}
	prog := startProgress(ctx, crawler, log, os.Stderr)
	results := crawler.Run(ctx, relays)
	prog.Stop()
	stopPool()
	poolWG.Wait()
	if pool != nil && ctx.Err() == nil {
		if _, err := pool.Drain(ctx); err != nil {
			log.Error("verify", zap.Error(err))
		}
	}
	code := 0
	for _, r := range results {
		fmt.Fprintln(os.Stderr, r.String())
		if !r.Drained() {
			code = 1
		}
	}
	if st, err := store.Stats(); err == nil {
		fmt.Fprintf(os.Stderr, "archive %s: %d events, %d valid, %d invalid, %d pending\n", c.data, st.Events, st.Valid, st.Invalid, st.Pending)
	}
	return code
}

// hotBytes is how much of what was just stored the verify pool may take
// from memory instead of reading it back, when it runs alongside ingest.
const hotBytes = 16 << 20

func parseKinds(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		var k int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &k); err != nil || k < 0 || k > 65535 {
			return nil, fmt.Errorf("kind %q is not an integer in [0,65535]", f)
		}
		out = append(out, k)
	}
	return out, nil
}

func parseAuthors(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		a := strings.ToLower(strings.TrimSpace(f))
		if !crawl.ValidAuthor(a) {
			return nil, fmt.Errorf("author %q is not a 64-digit hex pubkey", f)
		}
		out = append(out, a)
	}
	if len(out) > crawl.MaxAuthors {
		return nil, fmt.Errorf("%d authors, more than %d", len(out), crawl.MaxAuthors)
	}
	return out, nil
}

func usageError(what string, err error) int {
	fmt.Fprintf(os.Stderr, "archiver: %s: %v\n", what, err)
	return 2
}

// parseInterspersed parses flags that may come before, between or after
// the positional arguments, as users type them.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
