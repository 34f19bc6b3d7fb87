package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/nostr-archiver/archiver/importer"
	"go.uber.org/zap"
)

// maxListedMalformed is how many bad lines import names one by one; the
// rest are counted.
const maxListedMalformed = 20

func runImport(args []string) int {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `Usage: archiver import [--data DIR] [--name NAME] [--no-verify] FILE.jsonl|-

Imports events, one JSON object per line (strfry export, nak, archiver
export), keeping each line's bytes. Lines that are not events are
quarantined with their line number; the import goes on. Running it again
resumes where it stopped, or, once done, reads only what was appended.`)
		fs.PrintDefaults()
	}
	var c common
	name := fs.String("name", "", "the source's name in the archive (default: the file's base name; required for -)")
	noVerify := fs.Bool("no-verify", false, "store only; verify later with archiver reprocess")
	workers := fs.Int("verify-workers", runtime.GOMAXPROCS(0), "signature verification workers")
	c.register(fs)
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if len(rest) != 1 {
		return usageError("import", errors.New("want one FILE (or - for standard input)"))
	}
	path := rest[0]
	var in io.Reader = os.Stdin
	var size int64
	if path == "-" {
		if *name == "" {
			return usageError("import", errors.New("reading standard input needs --name, which lets a later run resume it"))
		}
	} else {
		f, err := os.Open(path)
		if err != nil {
			return usageError("import", err)
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			size = st.Size()
		}
		in = f
		if *name == "" {
			*name = filepath.Base(path)
		}
	}
	log, err := c.logger()
	if err != nil {
		return usageError("import", err)
	}
	store, err := c.openStore(log)
	if err != nil {
		return fail("import", openError(c.data, err))
	}
	// Shutdown order: the import stops (its batches are committed), the
	// verify pool finishes, then the store closes.
	defer func() {
		if err := store.Close(); err != nil {
			fail("import", fmt.Errorf("closing archive %s: %w", c.data, err))
		}
	}()
	ctx, stop := signalContext()
	defer stop()
	listed, unlisted := 0, 0
	opts := importer.Options{Store: store, Name: *name, OnMalformed: func(line int64, reason string) {
		if listed < maxListedMalformed {
			listed++
			fmt.Fprintf(stderr, "%s line %d quarantined: %s\n", path, line, reason)
		} else {
			unlisted++
		}
	}}
	var ver *verifier
	if *noVerify {
		if err := deferVerify(store); err != nil {
			return fail("import", fmt.Errorf("reading archive %s: %w", c.data, err))
		}
	} else {
		// Nothing queries the archive meanwhile: the verdicts' index keys
		// are built sorted once the import is verified.
		if err := store.DeferIndexes(); err != nil {
			return fail("import", fmt.Errorf("archive %s: %w", c.data, err))
		}
		if ver, err = startVerifier(ctx, store, *workers, log); err != nil {
			return usageError("--verify-workers", err)
		}
		opts.OnCommit = ver.Notify
	}
	im, err := importer.New(opts)
	if err != nil {
		if ver != nil {
			ver.stop()
		}
		return fail("import", err)
	}
	start := time.Now()
	prog := startProgress(ctx, log, stderr, importReport(im, size))
	res, err := im.Run(ctx, in)
	prog.Stop()
	if ver != nil {
		ver.finish(ctx)
	}
	if ierr := store.FinishIndexes(); ierr != nil {
		// Every event and verdict is stored; only the indexes wait.
		return fail("import", fmt.Errorf("%w; `archiver reprocess --index --data %s` builds them", ierr, c.data))
	}
	el := time.Since(start)
	if unlisted > 0 {
		fmt.Fprintf(stderr, "%s: %d more lines quarantined\n", path, unlisted)
	}
	if res.Restarted {
		fmt.Fprintf(stderr, "%s does not start as the file last imported as %q did: read from the start (held events are not stored twice)\n", path, *name)
	} else if res.ResumedAt > 0 {
		fmt.Fprintf(stderr, "resumed after line %d\n", res.ResumedAt)
	}
	fmt.Fprintf(stderr, "import %s: %d lines, %d events (%d new, %d already held, %d differing copies), %d quarantined, in %v (%.0f events/s)\n",
		*name, res.Lines, res.Events, res.New, res.Duplicates, res.Variants, res.Malformed, el.Round(time.Millisecond), float64(res.Events)/max(el.Seconds(), 1e-9))
	if st, serr := store.Stats(); serr == nil {
		fmt.Fprintf(stderr, "archive %s: %d events, %d valid, %d invalid, %d pending\n", c.data, st.Events, st.Valid, st.Invalid, st.Pending)
	}
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "import %s: stopped; run the same command to resume\n", *name)
		return 1
	case err != nil:
		return fail("import", err)
	}
	return 0
}

// importReport reports an import's position in its input and its rate.
func importReport(im *importer.Importer, size int64) report {
	last, lastAt := int64(0), time.Now()
	return func(now time.Time) (string, []zap.Field) {
		off, line, events := im.Progress()
		rate := float64(events-last) / now.Sub(lastAt).Seconds()
		last, lastAt = events, now
		pos := fmt.Sprintf("%d MiB", off>>20)
		if size > 0 {
			pos = fmt.Sprintf("%d/%d MiB (%.0f%%)", off>>20, size>>20, 100*float64(off)/float64(size))
		}
		return fmt.Sprintf("line %d  %s  events %d  %.0f/s", line, pos, events, rate),
			[]zap.Field{zap.Int64("line", line), zap.Int64("bytes", off), zap.Int64("size", size), zap.Int64("events", events), zap.Float64("events_per_sec", rate)}
	}
}
