package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/serve"
	"go.uber.org/zap"
)

// runServe answers Nostr clients from the archive, read-only. The store
// is opened read-only: while a crawl or the daemon holds the archive,
// serve refuses with ErrInUse (one process owns a store): the daemon
// serves the archive it writes itself ([serve], `archiver run --serve`).
func runServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c := common{access: accessReadOnly}
	listen := fs.String("listen", "127.0.0.1:7777", "address to serve WebSocket clients and the NIP-11 document on")
	o := serve.DefaultOptions()
	fs.IntVar(&o.MaxLimit, "max-limit", o.MaxLimit, "most events one filter of a REQ returns (NIP-11 max_limit)")
	fs.IntVar(&o.MaxSubs, "max-subscriptions", o.MaxSubs, "open subscriptions per connection")
	fs.IntVar(&o.MaxSyncEvents, "max-sync-events", o.MaxSyncEvents, "largest NIP-77 set; a larger one is refused 'blocked: too many records'")
	fs.Var(&c.cache, "cache", "block cache for reads, a `SIZE` such as 512MiB (default 32MiB): an archive served to many clients, or read again and again, is read faster from more")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: archiver serve [--data DIR] [--listen ADDR]\n\n"+
			"Serve the archive as a read-only Nostr relay (NIP-01 REQ, NIP-45 COUNT, NIP-77, NIP-11):\n"+
			"verified events only; EVENT is refused. The archive must be indexed\n"+
			"(archiver reprocess --index) and not held by a running crawl or daemon\n"+
			"(it is then in use: `archiver run --serve ADDR` serves an archive while writing it).\n\n")
		fs.PrintDefaults()
	}
	c.register(fs)
	log, store, code := c.open(fs, args)
	if store == nil {
		return code
	}
	defer store.Close()
	ready, err := store.IndexesReady()
	if err != nil {
		return fail("serve", fmt.Errorf("%s: %w", c.data, err))
	}
	if !ready {
		return fail("serve", fmt.Errorf("%s: %w: run `archiver reprocess --index --data %s` once, then serve", c.data, rawstore.ErrNotIndexed, c.data))
	}
	o.Addr = *listen
	o.ErrorLog = func(err error) { log.Info("serve", zap.Error(err)) }
	srv, err := serve.New(store, o)
	if err != nil {
		return fail("serve", err)
	}
	ctx, stop := signalContext()
	defer stop()
	fmt.Fprintf(os.Stderr, "serving %s read-only on %s\n", c.data, srv.URL())
	<-ctx.Done()
	if err := srv.Close(); err != nil {
		return fail("serve", err)
	}
	return 0
}

// startServing serves the open store at data on o.Addr, once its indexes
// are known complete (serve answers from them).
func startServing(store *rawstore.Store, data string, o serve.Options, log *zap.Logger) (*serve.Server, error) {
	ready, err := store.IndexesReady()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", data, err)
	}
	if !ready {
		return nil, fmt.Errorf("%s: %w: run `archiver reprocess --index --data %s` once, then serve", data, rawstore.ErrNotIndexed, data)
	}
	o.ErrorLog = func(err error) { log.Info("serve", zap.Error(err)) }
	srv, err := serve.New(store, o)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "serving %s read-only on %s\n", data, srv.URL())
	return srv, nil
}
