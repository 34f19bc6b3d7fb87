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
	el := time.Since(start)
	st, _ := store.Stats()
	fmt.Fprintf(os.Stderr, "verified %d copies in %v (%.0f/s): %d valid, %d invalid, %d pending\n",
		n, el.Round(time.Millisecond), float64(n)/max(el.Seconds(), 1e-9), st.Valid, st.Invalid, st.Pending)
	return 0
}
