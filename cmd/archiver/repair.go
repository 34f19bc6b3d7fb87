package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/lazyparse"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/relayconn"
	"go.uber.org/zap"
)

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// runRepair finds the damaged records (as check does) and fetches the
// bodies of the event ids among them again, by id, from the relays given
// with --relay or else every relay the archive has crawled: the damaged
// record itself no longer says which relay sent it. A fetched copy
// replaces the unreadable one and is verified like any other. Exit 0 when
// nothing is damaged any more, 1 otherwise (naming what is left).
func runRepair(args []string) int {
	fs := flag.NewFlagSet("repair", flag.ContinueOnError)
	c := common{access: accessExisting}
	var relays stringList
	fs.Var(&relays, "relay", "relay URL to fetch from (repeatable); default: every relay in the archive")
	timeout := fs.Duration("page-timeout", 15*time.Second, "idle time before a relay's answer counts as ended")
	c.register(fs)
	log, store, code := c.open(fs, args)
	if store == nil {
		return code
	}
	defer store.Close()
	for i, u := range relays {
		n, err := crawl.NormalizeURL(u)
		if err != nil {
			return usageError("--relay", err)
		}
		relays[i] = n
	}
	ctx, stop := signalContext()
	defer stop()

	rep, err := store.Check()
	if err != nil {
		return fail("repair", fmt.Errorf("%s: %w", c.data, err))
	}
	if rep.Damaged == 0 {
		fmt.Fprintf(os.Stdout, "nothing damaged in %s\n", c.data)
		return 0
	}
	want := map[[32]byte]bool{}
	for _, id := range rep.DamagedIDs {
		want[id] = true
	}
	if len(relays) == 0 {
		rs, err := store.Relays()
		if err != nil {
			return fail("repair", err)
		}
		for _, r := range rs {
			relays = append(relays, r.URL)
		}
	}
	fmt.Fprintf(os.Stdout, "%d damaged records, %d event ids to fetch from %d relays\n", rep.Damaged, len(want), len(relays))
	for _, url := range relays {
		if len(want) == 0 || ctx.Err() != nil {
			break
		}
		n, err := fetchByID(ctx, store, url, want, *timeout)
		if err != nil {
			log.Warn("repair: relay failed", zap.String("relay", url), zap.Error(err))
		}
		fmt.Fprintf(os.Stdout, "%s: %d fetched\n", url, n)
	}
	pool, err := lazyparse.New(lazyparse.Options{Store: store, Workers: runtime.GOMAXPROCS(0), Logger: log})
	if err != nil {
		return fail("repair", err)
	}
	if _, err := pool.Drain(ctx); err != nil {
		return fail("repair", fmt.Errorf("verify the fetched copies: %w", err))
	}
	after, err := store.Check()
	if err != nil {
		return fail("repair", err)
	}
	if after.Damaged > 0 {
		return fail("repair", fmt.Errorf("%s: %d damaged records left (%d event ids no relay served): %w", c.data, after.Damaged, len(after.DamagedIDs), after.Err()))
	}
	fmt.Fprintf(os.Stdout, "repaired: nothing damaged in %s\n", c.data)
	return 0
}

// fetchByID asks url for the ids still in want, stores what comes back,
// takes it out of want, and returns how many it stored.
func fetchByID(ctx context.Context, store *rawstore.Store, url string, want map[[32]byte]bool, idle time.Duration) (int, error) {
	d := crawl.DefaultOptions()
	conn, err := relayconn.Dial(ctx, url, relayconn.DialOptions{MaxFrame: d.MaxFrame, DialTimeout: d.DialTimeout, PingInterval: 30 * time.Second})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	idx, err := store.RelayIndex(url)
	if err != nil {
		return 0, err
	}
	ids := make([][32]byte, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	missing, err := crawl.FetchIDs(ctx, conn, store, idx, ids, idle)
	for _, id := range ids {
		delete(want, id)
	}
	for _, id := range missing {
		want[id] = true
	}
	return len(ids) - len(missing), err
}
