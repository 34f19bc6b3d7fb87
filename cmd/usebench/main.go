// Command usebench measures using an archive of the events of a JSONL
// file (docs/use-bench.sh makes one of a million signed events):
//
//   - `archiver import` of the file (verification included), events/s;
//   - the index bytes per event, on disk once compacted;
//   - the raw scan rate of the store (every valid event, in id order, as
//     export reads them), in this process;
//   - REQ latency p50/p99 against `archiver serve` by id, author, kind,
//     tag and time range: one connection, one REQ at a time, each timed
//     from its sending to its EOSE;
//   - a bulk download from serve: one REQ for everything, to EOSE.
//
// It prints a markdown report.
//
//	go run ./cmd/usebench -archiver ./archiver -jsonl events.jsonl -work DIR
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/rawstore"
)

type config struct {
	archiver, jsonl, work, listen, out string
	serveArgs                          string
	reuse                              bool
	samples                            int
	limit                              int
	seed                               uint64
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var c config
	fs := flag.NewFlagSet("usebench", flag.ContinueOnError)
	fs.StringVar(&c.archiver, "archiver", "", "archiver binary (required)")
	fs.StringVar(&c.jsonl, "jsonl", "", "events to import, one JSON object a line (required)")
	fs.StringVar(&c.work, "work", "", "directory for the archive (required; its archive is replaced)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:17902", "address archiver serve listens on")
	fs.StringVar(&c.out, "out", "", "also write the report to this file")
	fs.IntVar(&c.samples, "samples", 300, "REQs per kind of query")
	fs.IntVar(&c.limit, "limit", 500, "limit of the author, kind, tag and time-range REQs")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the query choice")
	fs.BoolVar(&c.reuse, "reuse", false, "serve the archive a previous run left in -work: no import, no store measures")
	fs.StringVar(&c.serveArgs, "serve-args", "", "extra `archiver serve` flags, space-separated (e.g. --cpuprofile FILE)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if c.archiver == "" || c.jsonl == "" || c.work == "" || c.samples < 1 || c.limit < 1 {
		fmt.Fprintln(os.Stderr, "usebench: -archiver, -jsonl and -work are required; -samples and -limit positive")
		os.Exit(2)
	}
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "usebench:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "usebench: "+format+"\n", args...)
}

func run(ctx context.Context, c config) error {
	data := filepath.Join(c.work, "archive")
	progress("reading %s for queries", c.jsonl)
	sam, err := readSamples(c.jsonl, c.seed)
	if err != nil {
		return err
	}
	var rep report
	rep.events = sam.events

	if !c.reuse {
		if err := importAndMeasure(ctx, c, data, &rep); err != nil {
			return err
		}
	}
	progress("starting archiver serve")
	srv, err := startServe(ctx, c.archiver, data, c.listen, sam.events, strings.Fields(c.serveArgs))
	if err != nil {
		return err
	}
	defer srv.stop()
	conn, err := dial("ws://" + c.listen)
	if err != nil {
		return err
	}
	defer conn.close()
	for _, q := range sam.queries(c.samples, c.limit) {
		if len(q.filters) == 0 {
			progress("no event to ask for by %s", q.name)
			continue
		}
		progress("REQ by %s", q.name)
		r, err := conn.time(ctx, q)
		if err != nil {
			return err
		}
		rep.reqs = append(rep.reqs, r)
	}
	progress("bulk download")
	if rep.bulkEvents, rep.bulkBytes, rep.bulkTime, err = conn.bulk(ctx, sam.events); err != nil {
		return err
	}
	if err := srv.stop(); err != nil {
		return err
	}
	out := rep.markdown()
	fmt.Print(out)
	if c.out != "" {
		return os.WriteFile(c.out, []byte(out), 0o644)
	}
	return nil
}

// importAndMeasure times storing alone, into a scratch archive, then the
// import a person runs (storing and verifying) into data, and measures
// the store.
func importAndMeasure(ctx context.Context, c config, data string, rep *report) error {
	scratch := filepath.Join(c.work, "scratch")
	var err error
	if rep.storeTime, err = importFile(ctx, c.archiver, scratch, c.jsonl, "--no-verify"); err != nil {
		return err
	}
	if err := os.RemoveAll(scratch); err != nil {
		return err
	}
	if rep.importTime, err = importFile(ctx, c.archiver, data, c.jsonl); err != nil {
		return err
	}
	return measureStore(ctx, data, rep)
}

// importFile times `archiver import` of file into a new archive in data.
func importFile(ctx context.Context, bin, data, file string, flags ...string) (time.Duration, error) {
	if err := os.RemoveAll(data); err != nil {
		return 0, err
	}
	progress("archiver import %s", strings.Join(flags, " "))
	start := time.Now()
	imp := exec.CommandContext(ctx, bin, append(append([]string{"import", "--data", data}, flags...), file)...)
	imp.Stdout, imp.Stderr = io.Discard, os.Stderr
	if err := imp.Run(); err != nil {
		return 0, fmt.Errorf("archiver import %s: %w", strings.Join(flags, " "), err)
	}
	return time.Since(start), nil
}

// measureStore compacts the indexes (so that their size is what they
// take at rest), measures them, and times a raw scan of the store.
func measureStore(ctx context.Context, data string, rep *report) error {
	s, err := rawstore.Open(rawstore.Options{Dir: data, NoCreate: true})
	if err != nil {
		return fmt.Errorf("open %s: %w", data, err)
	}
	err = measureOpen(ctx, s, rep)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}

func measureOpen(ctx context.Context, s *rawstore.Store, rep *report) error {
	db := s.DB()
	progress("compacting the indexes")
	if err := db.Compact(ctx, []byte{'I'}, []byte{'J'}, true); err != nil {
		return fmt.Errorf("compact indexes: %w", err)
	}
	idx, err := db.EstimateDiskUsage([]byte{'I'}, []byte{'J'})
	if err != nil {
		return err
	}
	all, err := db.EstimateDiskUsage([]byte{0}, []byte{0xff})
	if err != nil {
		return err
	}
	rep.indexBytes, rep.archiveBytes = int64(idx), int64(all)
	progress("raw scan")
	start := time.Now()
	err = s.ForEachValid(func(_ [32]byte, raw []byte) error {
		rep.scanEvents++
		rep.scanBytes += int64(len(raw))
		return nil
	})
	rep.scanTime = time.Since(start)
	if err != nil {
		return fmt.Errorf("raw scan: %w", err)
	}
	return nil
}

// samples is what the queries are drawn from: a random event's id,
// author, kind and tags are what a client would ask for.
type samples struct {
	events   int64
	picks    []*event.Event // a uniform sample of the events
	since    int64
	until    int64
	rnd      *rand.Rand
	tagCount int
}

const reservoir = 20000

func readSamples(path string, seed uint64) (*samples, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := &samples{rnd: rand.New(rand.NewPCG(seed, 14)), since: 1 << 62}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		e, err := event.Parse(sc.Bytes())
		if err != nil {
			continue // import quarantines it; nothing to ask for
		}
		s.events++
		s.since, s.until = min(s.since, e.CreatedAt), max(s.until, e.CreatedAt)
		if len(s.picks) < reservoir {
			s.picks = append(s.picks, e)
		} else if i := s.rnd.Int64N(s.events); i < reservoir {
			s.picks[i] = e
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if s.events == 0 {
		return nil, fmt.Errorf("%s holds no event", path)
	}
	return s, nil
}

// query is one kind of REQ and its filters.
type query struct {
	name    string
	filters []string
}

func (s *samples) queries(n, limit int) []query {
	pick := func() *event.Event { return s.picks[s.rnd.IntN(len(s.picks))] }
	gen := func(name string, f func() string) query {
		q := query{name: name}
		// Bounded: a corpus may have no event with such a tag.
		for try := 0; len(q.filters) < n && try < 100*n; try++ {
			if fl := f(); fl != "" {
				q.filters = append(q.filters, fl)
			}
		}
		return q
	}
	// tagQuery asks for a tag of letter of a random event that has one.
	tagQuery := func(letter string) func() string {
		return func() string {
			e := pick()
			var vals []string
			for _, t := range e.Tags {
				if len(t) >= 2 && t[0] == letter {
					vals = append(vals, t[1])
				}
			}
			if len(vals) == 0 {
				return ""
			}
			v, _ := json.Marshal(vals[s.rnd.IntN(len(vals))]) // not %q: Go escapes are not JSON's
			return fmt.Sprintf(`{"#%s":[%s],"limit":%d}`, letter, v, limit)
		}
	}
	return []query{
		gen("id", func() string { e := pick(); return fmt.Sprintf(`{"ids":["%x"]}`, e.ID) }),
		gen("author", func() string { e := pick(); return fmt.Sprintf(`{"authors":["%x"],"limit":%d}`, e.PubKey, limit) }),
		gen("author+kind", func() string {
			e := pick()
			return fmt.Sprintf(`{"authors":["%x"],"kinds":[%d],"limit":%d}`, e.PubKey, e.Kind, limit)
		}),
		gen("kind", func() string { e := pick(); return fmt.Sprintf(`{"kinds":[%d],"limit":%d}`, e.Kind, limit) }),
		gen("tag #e", tagQuery("e")),
		gen("tag #p", tagQuery("p")),
		gen("tag #t", tagQuery("t")),
		gen("time range (1 hour)", func() string {
			at := s.since + s.rnd.Int64N(max(1, s.until-s.since))
			return fmt.Sprintf(`{"since":%d,"until":%d,"limit":%d}`, at, at+3600, limit)
		}),
	}
}

// server is a running `archiver serve`.
type server struct {
	cmd  *exec.Cmd
	done chan error
}

func startServe(ctx context.Context, bin, data, listen string, events int64, extra []string) (*server, error) {
	args := append([]string{"serve", "--data", data, "--listen", listen, "--max-limit", fmt.Sprint(events)}, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("archiver serve: %w", err)
	}
	s := &server{cmd: cmd, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		// Reads serve's log to its end (the pipe closes when it exits),
		// so serve never blocks on it.
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "serving ") && ready != nil {
				close(ready)
				ready = nil
			}
		}
		s.done <- cmd.Wait()
	}()
	select {
	case <-ready:
		return s, nil
	case err := <-s.done:
		s.done <- err
		return nil, fmt.Errorf("archiver serve exited before serving: %v", err)
	case <-time.After(2 * time.Minute):
		_ = s.stop()
		return nil, errors.New("archiver serve did not start in 2 minutes")
	}
}

// stop interrupts serve and waits for it; it may be called again.
func (s *server) stop() error {
	if s.cmd.ProcessState != nil {
		return nil
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	err := <-s.done
	s.done <- err
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == -1 {
		return nil // ended by the signal
	}
	return err
}

// reqResult is one kind of REQ's timings.
type reqResult struct {
	name      string
	durations []time.Duration
	events    int64
}

func (r reqResult) pct(p float64) time.Duration {
	d := slices.Clone(r.durations)
	slices.Sort(d)
	return d[min(len(d)-1, int(p*float64(len(d))))]
}

type report struct {
	events                   int64
	importTime, storeTime    time.Duration
	indexBytes, archiveBytes int64
	scanEvents, scanBytes    int64
	scanTime                 time.Duration
	reqs                     []reqResult
	bulkEvents, bulkBytes    int64
	bulkTime                 time.Duration
}

func rate(n int64, d time.Duration) string {
	return fmt.Sprintf("%.0f", float64(n)/d.Seconds())
}

func mb(n int64, d time.Duration) string {
	return fmt.Sprintf("%.0f MB/s", float64(n)/1e6/d.Seconds())
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }

func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d events.\n\n| measure | value |\n|---|---|\n", r.events)
	if r.importTime > 0 {
		r.storeRows(&b)
	}
	fmt.Fprintf(&b, "| bulk download from serve (one REQ, to EOSE) | %d events in %v: %s events/s, %s of frames |\n", r.bulkEvents, r.bulkTime.Round(time.Millisecond), rate(r.bulkEvents, r.bulkTime), mb(r.bulkBytes, r.bulkTime))
	fmt.Fprintf(&b, "\n| REQ by | REQs | events per REQ (mean) | p50 ms | p99 ms |\n|---|---|---|---|---|\n")
	for _, q := range r.reqs {
		fmt.Fprintf(&b, "| %s | %d | %.1f | %s | %s |\n", q.name, len(q.durations), float64(q.events)/float64(len(q.durations)), ms(q.pct(0.5)), ms(q.pct(0.99)))
	}
	return b.String()
}

// storeRows are the import and store measures.
func (r *report) storeRows(b *strings.Builder) {
	n := float64(r.events)
	fmt.Fprintf(b, "| `archiver import` (verifying) | %v, %s events/s |\n", r.importTime.Round(time.Millisecond), rate(r.events, r.importTime))
	fmt.Fprintf(b, "| `archiver import --no-verify` (storing only) | %v, %s events/s |\n", r.storeTime.Round(time.Millisecond), rate(r.events, r.storeTime))
	fmt.Fprintf(b, "| indexes on disk, compacted | %.1f B/event (whole archive %.0f B/event) |\n", float64(r.indexBytes)/n, float64(r.archiveBytes)/n)
	fmt.Fprintf(b, "| raw scan of the store (ForEachValid) | %d events in %v: %s events/s, %s |\n", r.scanEvents, r.scanTime.Round(time.Millisecond), rate(r.scanEvents, r.scanTime), mb(r.scanBytes, r.scanTime))
}
