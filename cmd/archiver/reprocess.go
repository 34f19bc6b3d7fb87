package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/nostr-archiver/archiver/lazyparse"
	"go.uber.org/zap"
)

func runReprocess(args []string) int {
	fs := flag.NewFlagSet("reprocess", flag.ContinueOnError)
	c := common{access: accessExisting}
	all := fs.Bool("all", false, "forget every verdict and verify every stored copy again")
	index := fs.Bool("index", false, "build the indexes of an archive from before them (export --filter needs them), its deletion-request index (show and stats need it), and its sighting index (a crawl's audit reads it); resumes an interrupted build")
	workers := fs.Int("verify-workers", runtime.GOMAXPROCS(0), "signature verification workers")
	c.register(fs)
	log, store, code := c.open(fs, args)
	if store == nil {
		return code
	}
	defer store.Close()
	stopProfile, err := c.profile()
	if err != nil {
		return usageError("--cpuprofile", err)
	}
	defer stopProfile()
	ctx, stop := signalContext()
	defer stop()
	if *all {
		n, err := store.ResetVerdicts()
		if err != nil {
			log.Error("reset verdicts", zap.Error(err))
			return 1
		}
		log.Info("forgot every verdict", zap.Int64("pending_ids", n))
	}
	if *index {
		start := time.Now()
		n, err := store.BuildIndexes(ctx, func(n int64) {
			log.Info("indexing", zap.Int64("valid_events", n), zap.Duration("elapsed", time.Since(start).Round(time.Second)))
		})
		if err != nil {
			log.Error("build indexes (run the same command to resume)", zap.Error(err))
			return 1
		}
		fmt.Fprintf(os.Stderr, "indexed %d valid events in %v\n", n, time.Since(start).Round(time.Millisecond))
		start = time.Now()
		n, err = store.BuildSightingIndex(ctx, func(n int64) {
			log.Info("indexing sightings", zap.Int64("events", n), zap.Duration("elapsed", time.Since(start).Round(time.Second)))
		})
		if err != nil {
			log.Error("build sighting index (run the same command to resume)", zap.Error(err))
			return 1
		}
		if n > 0 {
			fmt.Fprintf(os.Stderr, "indexed the sightings of %d events in %v\n", n, time.Since(start).Round(time.Millisecond))
		}
	}
	// Nothing queries the archive meanwhile: the verdicts' index keys are
	// built sorted once the drain is done.
	if err := store.DeferIndexes(); err != nil {
		log.Error("defer indexes", zap.Error(err))
		return 1
	}
	pool, err := lazyparse.New(lazyparse.Options{Store: store, Workers: *workers, Logger: log})
	if err != nil {
		log.Error("verify pool", zap.Error(err))
		return 1
	}
	start := time.Now()
	n, err := pool.Drain(ctx)
	if err != nil {
		log.Error("verify", zap.Error(err))
		return 1
	}
	if err := store.FinishIndexes(); err != nil {
		log.Error("build indexes (`archiver reprocess --index` builds them)", zap.Error(err))
		return 1
	}
	el := time.Since(start)
	st, _ := store.Stats()
	fmt.Fprintf(os.Stderr, "verified %d copies in %v (%.0f/s): %d valid, %d invalid, %d pending\n",
		n, el.Round(time.Millisecond), float64(n)/max(el.Seconds(), 1e-9), st.Valid, st.Invalid, st.Pending)
	return 0
}
