package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/filter"
	"github.com/nostr-archiver/archiver/rawstore"
	"go.uber.org/zap"
)

func runExport(args []string) int {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	c := common{access: accessReadOnly}
	out := fs.String("out", "-", "output file (- for stdout)")
	var filters []filter.Filter
	fs.Func("filter", "export only the events matching this NIP-01 filter (JSON object, or an array of them), newest first, from the indexes", func(v string) (err error) {
		filters, err = filter.Parse([]byte(v))
		return err
	})
	latest := fs.Bool("latest", false, "with --filter: only the latest version of each replaceable and addressable event (as a relay keeping only those would answer)")
	honor := fs.Bool("honor-deletions", false, "with --filter: leave out the events a deletion request (kind 5) of their own author names, as NIP-09 relays would (the archive keeps them)")
	c.register(fs)
	log, store, code := c.open(fs, args)
	if store == nil {
		return code
	}
	defer store.Close()
	var w io.Writer = os.Stdout
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			log.Error("export", zap.Error(err))
			return 1
		}
		defer f.Close()
		w = f
	}
	if *latest && filters == nil {
		return usageError("export", errors.New("--latest needs --filter (use --filter '{}' for every event)"))
	}
	if *honor && filters == nil {
		return usageError("export", errors.New("--honor-deletions needs --filter (use --filter '{}' for every event)"))
	}
	if filters != nil {
		query := store.Query
		if *latest {
			query = store.QueryLatest
		}
		if *honor {
			deleted, err := store.DeletedIDs()
			if err != nil {
				return fail("export", fmt.Errorf("%s: deletion requests: %w", c.data, err))
			}
			query = func(fs []filter.Filter, fn func(*event.Event, []byte) error) error {
				return store.QueryExcept(*latest, deleted, fs, fn)
			}
		}
		return exportFiltered(c.data, query, store, filters, w)
	}
	n, err := export(store, w)
	if errors.Is(err, rawstore.ErrCorrupt) {
		// Every line written is whole; the damaged events are missing.
		fmt.Fprintf(os.Stderr, "exported %d valid events\n", n)
		return fail("export", fmt.Errorf("%s: %w", c.data, err))
	}
	if err != nil {
		log.Error("export", zap.Error(err))
		return 1
	}
	fmt.Fprintf(os.Stderr, "exported %d valid events\n", n)
	return 0
}

// validSource is what export reads: rawstore.Store.
type validSource interface {
	ForEachValid(fn func(id [32]byte, raw []byte) error) error
}

// export writes every valid event as one compact JSON object per line
// (the canonical key order; `strfry import` and `nak` read it).
func export(src validSource, w io.Writer) (int, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	n := 0
	var line []byte
	// A damaged record is skipped by ForEachValid, which goes on and
	// returns the damage at the end: flush what was read whole first.
	err := src.ForEachValid(func(id [32]byte, raw []byte) error {
		e, err := event.Parse(raw)
		if err != nil || e.ID != id {
			return fmt.Errorf("event %x marked valid does not parse: %v", id[:8], err)
		}
		line = append(event.AppendJSON(line[:0], e), '\n')
		n++
		_, err = bw.Write(line)
		return err
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return n, err
}

// exportFiltered writes the valid events matching filters, newest first,
// reading only the index ranges they select (rawstore.Store.Query).
func exportFiltered(data string, query func([]filter.Filter, func(*event.Event, []byte) error) error, store *rawstore.Store, filters []filter.Filter, w io.Writer) int {
	bw := bufio.NewWriterSize(w, 1<<20)
	n := 0
	var line []byte
	err := query(filters, func(e *event.Event, _ []byte) error {
		line = append(event.AppendJSON(line[:0], e), '\n')
		n++
		_, err := bw.Write(line)
		return err
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if errors.Is(err, rawstore.ErrNotIndexed) {
		return fail("export", fmt.Errorf("%s: %w: run `archiver reprocess --index --data %s` once, then export again", data, err, data))
	}
	fmt.Fprintf(os.Stderr, "exported %d valid events matching the filter\n", n)
	if err != nil {
		return fail("export", fmt.Errorf("%s: %w", data, err))
	}
	if st, err := store.Stats(); err == nil && st.Pending > 0 {
		// Not an error: what is exported is verified; the rest is not yet.
		fmt.Fprintf(os.Stderr, "%d stored events are not verified yet and were not considered (archiver reprocess)\n", st.Pending)
	}
	return 0
}
