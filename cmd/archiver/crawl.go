package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/nostr-archiver/archiver/config"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/relayconn"
	"github.com/nostr-archiver/archiver/serve"
)

func runCrawl(args []string) int {
	fs := flag.NewFlagSet("crawl", flag.ContinueOnError)
	d := crawl.DefaultOptions()
	var (
		c        common
		since    = fs.String("since", "", "oldest created_at to archive (unix seconds, RFC 3339, YYYY-MM-DD, or a duration ago like 30d); default: everything")
		until    = fs.String("until", "", "newest created_at to archive; default: now")
		noVerify = fs.Bool("no-verify", false, "store events without verifying them (run `archiver reprocess` later)")
		limit    = fs.Int("limit", 0, "REQ page limit; default: the relay's NIP-11 max_limit, else 500")
		inflight = fs.Int("inflight", d.MaxInFlightPerConn, "most REQs in flight per relay connection (the controller starts lower and learns)")
		conns    = fs.Int("conns", d.MaxConnsPerRelay, "most connections per relay")
		total    = fs.Int("max-conns", d.MaxConns, "most connections across all relays")
		startC   = fs.Int("start-conns", d.StartConns, "connections per relay before the controller learns more")
		startR   = fs.Int("start-inflight", d.StartInFlight, "REQs in flight per connection before the controller learns more")
		shards   = fs.Int("shards", d.Shards, "initial created_at shards of a relay's job (idle workers split the largest)")
		workers  = fs.Int("verify-workers", runtime.GOMAXPROCS(0), "signature verification workers")
		kinds    = fs.String("kinds", "", "only these kinds, comma-separated")
		authors  = fs.String("authors", "", "only these authors: hex pubkeys, comma-separated (a crawl's cursors belong to its range and filter)")
		timeout  = fs.Duration("page-timeout", d.PageTimeout, "give up on a page after this long without a frame")
		serveOn  = fs.String("serve", "", "also serve the archive as a read-only Nostr relay on this address while crawling (verified events only)")
		recheck  = fs.Bool("recheck", false, "check what earlier runs of the job paged against each relay's COUNT or NIP-77 again, paging again only where the relay now holds events the archive lacks (events published with an old created_at since); a relay answering neither is paged again whole")
		prove    = fs.Bool("nip77-proof", true, "after a relay is drained, reconcile the range over NIP-77 where its NIP-11 lists 77: fetch what paging missed and record the proof (not with --kinds or --authors)")
	)
	var keyFiles repeated
	fs.Var(&keyFiles, "auth-key-file", authKeyFileHelp)
	maxFrame := config.ByteSize(d.MaxFrame)
	fs.Var(&maxFrame, "max-frame", fmt.Sprintf("largest WebSocket message read from a relay, %v to %v (a relay's page holding a larger event fails)", config.ByteSize(config.MinFrameBytes), config.ByteSize(config.MaxFrameBytes)))
	c.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: archiver crawl [flags] RELAY_URL...\n\nArchives each relay once and exits 0 when every relay was drained.\nRELAY_URL: wss://host[:port][/path], ws://host[:port][/path], or a bare host (wss://host).")
		fs.PrintDefaults()
	}
	args, err := parseInterspersed(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, "archiver crawl: no relay given")
		fs.Usage()
		return 2
	}
	// Everything is checked before anything is created or dialed.
	relays := make([]string, len(args))
	for i, a := range args {
		if relays[i], err = crawl.NormalizeURL(a); err != nil {
			return usageError("crawl", err)
		}
	}
	now := time.Now()
	opts := crawl.Options{
		PageLimit: *limit, PageTimeout: *timeout, Shards: *shards,
		MaxInFlightPerConn: *inflight, MaxConnsPerRelay: *conns, MaxConns: *total,
		StartConns: *startC, StartInFlight: *startR, Recheck: *recheck, RecheckByPaging: *recheck,
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
	if maxFrame < config.MinFrameBytes || maxFrame > config.MaxFrameBytes {
		return usageError("--max-frame", fmt.Errorf("%v is outside %v to %v", maxFrame, config.ByteSize(config.MinFrameBytes), config.ByteSize(config.MaxFrameBytes)))
	}
	opts.MaxFrame = int(maxFrame)
	if err := opts.Check(); err != nil {
		return usageError("crawl", err)
	}
	if opts.AuthKeys, err = loadAuthKeys(keyFiles); err != nil {
		return usageError("--auth-key-file", err)
	}
	log, err := c.logger()
	if err != nil {
		return usageError("crawl", err)
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
		c.hotBytes = rawstore.VerifyHotBytes
	}
	store, err := c.openStore(log)
	if err != nil {
		return fail("crawl", openError(c.data, err))
	}
	// Shutdown order: the crawl stops first (its last batches are
	// committed), then the verify pool finishes its batch, then the store
	// closes (flushing Pebble).
	defer func() {
		if err := store.Close(); err != nil {
			fail("crawl", fmt.Errorf("closing archive %s: %w", c.data, err))
		}
	}()

	if *noVerify {
		if err := deferVerify(store); err != nil {
			return fail("crawl", fmt.Errorf("reading archive %s: %w", c.data, err))
		}
	}
	if *serveOn != "" {
		so := serve.DefaultOptions()
		so.Addr = *serveOn
		srv, err := startServing(store, c.data, so, log)
		if err != nil {
			return fail("crawl", fmt.Errorf("--serve: %w", err))
		}
		defer srv.Close() // before the store closes (deferred earlier)
	}
	if !*noVerify && *serveOn == "" {
		// Nothing queries the indexes before the crawl ends: their keys
		// are built sorted at the end (Close) instead of through the
		// memtable and compactions.
		if err := store.DeferIndexes(); err != nil {
			return fail("crawl", fmt.Errorf("archive %s: %w", c.data, err))
		}
	}
	var ver *verifier
	if !*noVerify {
		if ver, err = startVerifier(ctx, store, *workers, log); err != nil {
			return usageError("--verify-workers", err)
		}
		opts.OnCommit = ver.Notify
	}
	opts.Store, opts.Logger = store, log
	crawler, err := crawl.New(opts)
	if err != nil {
		if ver != nil {
			ver.stop()
		}
		return usageError("crawl", err)
	}
	prog := startProgress(ctx, log, stderr, crawlReport(crawler))
	results := crawler.Run(ctx, relays)
	prog.Stop()
	proofs := map[string]crawl.SyncResult{}
	if *prove && opts.Kinds == nil && opts.Authors == nil {
		so := crawl.SyncOptions{Store: store, Logger: log, Since: opts.Since, Until: -1, Idle: *timeout, OnlyIfListed: true,
			Dial: relayconn.DialOptions{MaxFrame: opts.MaxFrame, DialTimeout: d.DialTimeout, PingInterval: 30 * time.Second}}
		if *until != "" {
			so.Until = opts.Until
		}
		for _, r := range results {
			// A relay whose every range this run was reconciled over
			// NIP-77 by the audit needs no second, whole-range check.
			if r.Drained() && r.Proof != crawl.ProofNIP77 && ctx.Err() == nil {
				proofs[r.Relay] = crawl.Sync(ctx, so, r.Relay)
			}
		}
	}
	if ver != nil {
		ver.finish(ctx)
	}
	code := 0
	if err := store.FinishIndexes(); err != nil {
		// Every event and verdict is stored; only the indexes wait.
		fmt.Fprintf(stderr, "archiver crawl: %v; `archiver reprocess --index --data %s` builds them\n", err, c.data)
		code = 1
	}
	damage := store.Damage()
	for _, r := range results {
		fmt.Fprintln(stderr, r.String()+damageNote(damage, c.data))
		if h := hint(r); h != "" {
			fmt.Fprintln(stderr, "  "+h)
		}
		if !r.Drained() {
			code = 1
		}
		if p, ok := proofs[r.Relay]; ok && p.Outcome != crawl.SyncUnsupported {
			fmt.Fprintf(stderr, "  NIP-77 check: %s, needed %d, fetched %d", p.Outcome, p.Needed, p.Fetched)
			if p.Detail != "" {
				fmt.Fprintf(stderr, ": %s", p.Detail)
			}
			fmt.Fprintln(stderr)
			// Paging said drained, but the relay holds ids the archive
			// still lacks: not complete.
			if p.Needed > p.Fetched || p.Outcome == crawl.SyncFailed {
				code = 1
			}
		}
	}
	summary(stderr, store, c.data)
	return storeVerdict("crawl", code, store)
}

// summary is the last lines of a command that fetched into the archive:
// what it repaired, and what the archive holds.
func summary(w io.Writer, store *rawstore.Store, data string) {
	if n := store.Repaired(); n > 0 {
		fmt.Fprintf(w, "repaired %d damaged records of %s with the copies relays served again\n", n, data)
	}
	if st, err := store.Stats(); err == nil {
		fmt.Fprintf(w, "archive %s: %d events, %d valid, %d invalid, %d pending\n", data, st.Events, st.Valid, st.Invalid, st.Pending)
	}
}

// storeVerdict is the exit code once the store had its say: a relay
// drained into an archive that could not take every write, or that holds
// records it could not read back, is not complete.
func storeVerdict(cmd string, code int, store *rawstore.Store) int {
	if err := store.Failed(); err != nil {
		return fail(cmd, err)
	}
	if err := store.Damage(); err != nil {
		return fail(cmd, fmt.Errorf("not complete: %w", err))
	}
	return code
}

// damageNote is what each relay's line adds when the store met damaged
// records during the run (err is store.Damage()): the relay's events may
// be among them, so drained or not, its crawl is not complete.
func damageNote(err error, data string) string {
	var de *rawstore.DamageError
	if !errors.As(err, &de) {
		return ""
	}
	return fmt.Sprintf("; not complete: the archive met %d damaged records during the run (`archiver check --data %s` lists them, `archiver repair --data %s` fetches them again)", de.N, data, data)
}

// hint says what to try next after a relay could not be reached, from the
// cause the crawl reported.
func hint(r crawl.Result) string {
	if h, ok := authHints[r.Finish]; ok {
		return h
	}
	if r.Finish != crawl.FinishUnreachable {
		return ""
	}
	d := r.Detail
	switch {
	case strings.Contains(d, "no such host"), strings.Contains(d, "server misbehaving"):
		return "the host name does not resolve: check the address for a typo (and that this machine can reach DNS)"
	case strings.Contains(d, "connection refused"):
		return "nothing accepts connections there: check the port, or the relay may be down; try again later"
	case strings.Contains(d, "first record does not look like a TLS handshake"):
		return "the relay does not speak TLS on that port: try ws:// instead of wss://"
	case strings.Contains(d, "certificate"):
		return "the relay's TLS certificate is not valid for that name: check the address"
	case strings.Contains(d, "HTTP 429"):
		return "the relay refuses more connections from this address: try again later, with --conns 1"
	case strings.Contains(d, "upgrade") && strings.HasPrefix(r.Relay, "ws://"):
		return "the server did not accept a WebSocket: check the path, or try wss:// instead of ws://"
	case strings.Contains(d, "upgrade"):
		return "the server did not accept a WebSocket: check the address and path"
	}
	return "check the address; the relay may be down, or try wss:// instead of ws:// (or the reverse)"
}

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
