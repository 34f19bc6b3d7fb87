package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/rawstore"
	"go.uber.org/zap"
)

func runExport(args []string) int {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	c := common{access: accessReadOnly}
	out := fs.String("out", "-", "output file (- for stdout)")
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
