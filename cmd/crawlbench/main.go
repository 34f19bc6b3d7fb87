// Command crawlbench measures the archiver's crawl against a loopback test
// relay holding a million events, and prints a markdown table for the
// README:
//
//	(a) a raw reader in this process (page, scan id and created_at, count):
//	    the relay's serving limit, at 1x1 and at the concurrency (c) chose;
//	(b) `archiver crawl --no-verify` held to one connection, one REQ;
//	(c) `archiver crawl --no-verify` with the adaptive controller;
//	(d) `archiver reprocess` of (c)'s archive: lazy verification;
//	(d') what one verify worker does per event (parse, recompute the id,
//	     batch-verify), on raw fixture events in memory, one goroutine;
//	(e) a plain btcec Schnorr verify loop over the same events;
//	(f) `archiver crawl` verifying while it crawls, until every event has
//	    a verdict.
//
// The relay and the archiver run as child processes, so each one's memory
// is its own: peak RSS comes from the kernel's rusage of the archiver.
// The first run signs the fixture (about a minute per million events on
// two cores) and caches it; later runs load it.
//
//	go run ./cmd/crawlbench                 # 1M events
//	go run ./cmd/crawlbench -events 100000  # a quick run
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nostr-archiver/archiver/nip11"
)

// The archiver's crawl flags per scenario, in one place. The fixed run
// pins the controller to one connection with one REQ in flight; the
// adaptive run takes the defaults. --log-level debug makes the archiver
// log each page, which is how crawlbench follows its progress (a few
// thousand lines per million events).
var (
	crawlCommon  = []string{"--log-level", "debug", "--no-verify"}
	fixedArgs    = []string{"--conns", "1", "--inflight", "1", "--start-conns", "1", "--start-inflight", "1"}
	adaptiveArgs = []string{}
)

// config is crawlbench's flags.
type config struct {
	events       int
	seed         uint64
	cache        string
	src          string
	limit        int
	rawConns     int
	rawInflight  int
	verifyEvents int
	crawlArgs    string
	relayArgs    string
	out          string
	keep         bool
	verbose      bool
	quick        bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		switch {
		case ctx.Err() != nil:
			fmt.Fprintln(os.Stderr, "crawlbench: interrupted")
		case !errors.Is(err, flag.ErrHelp):
			fmt.Fprintln(os.Stderr, "crawlbench:", err)
		}
		stop()
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var c config
	cacheDir, err := os.UserCacheDir()
	if err != nil {
		cacheDir = os.TempDir()
	}
	fs := flag.NewFlagSet("crawlbench", flag.ContinueOnError)
	fs.IntVar(&c.events, "events", 1_000_000, "events the relay serves")
	fs.Uint64Var(&c.seed, "seed", 1, "fixture seed")
	fs.StringVar(&c.cache, "fixture-cache", filepath.Join(cacheDir, "archiver-bench"), "directory caching signed fixtures across runs")
	fs.StringVar(&c.src, "src", "", "archiver module directory to build from (default: the module of the working directory)")
	fs.IntVar(&c.limit, "limit", 0, "raw reader's page limit (0: the relay's NIP-11 max_limit, else 500, as the archiver picks)")
	fs.IntVar(&c.rawConns, "raw-conns", 0, "raw reader's connections for the comparison with (c) (0: what (c) settled on)")
	fs.IntVar(&c.rawInflight, "raw-inflight", 0, "raw reader's REQs in flight per connection (0: what (c) settled on)")
	fs.IntVar(&c.verifyEvents, "verify-events", 20_000, "events of the in-memory verify loops (d') and (e)")
	fs.StringVar(&c.crawlArgs, "crawl-args", "", "extra `archiver crawl` flags for both archiver runs, space-separated")
	fs.StringVar(&c.relayArgs, "relay-args", "", "extra `testrelay` flags, space-separated: e.g. \"-latency 100ms -page-workers 4 -capacity 30000\" serves like a remote relay (per-REQ latency, per-connection and relay-wide limits) instead of as fast as loopback allows")
	fs.StringVar(&c.out, "out", "", "also write the markdown report to this file")
	fs.BoolVar(&c.keep, "keep", false, "keep the binaries and archives (their directory is printed)")
	fs.BoolVar(&c.verbose, "v", false, "echo and report every concurrency decision of the adaptive run")
	fs.BoolVar(&c.quick, "quick", false, "run only (a) and (c): the raw reader and the adaptive crawl")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.events < 1 || c.verifyEvents < 1 || c.limit < 0 || c.rawConns < 0 || c.rawInflight < 0 {
		return c, errors.New("-events and -verify-events must be positive; -limit, -raw-conns and -raw-inflight not negative")
	}
	return c, nil
}

func run(ctx context.Context, args []string) error {
	c, err := parseFlags(args)
	if err != nil {
		return err
	}
	if c.src == "" {
		if c.src, err = moduleRoot(ctx); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "crawlbench-")
	if err != nil {
		return err
	}
	if c.keep {
		fmt.Fprintln(os.Stderr, "crawlbench: keeping", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}

	progress("building archiver and testrelay")
	archiver, relayBin, err := buildBinaries(ctx, c.src, tmp)
	if err != nil {
		return err
	}
	progress("starting testrelay with %d events (the first run signs them and caches them in %s)", c.events, c.cache)
	relayStart := time.Now()
	relayArgs := append([]string{"-listen", "127.0.0.1:0", "-events", strconv.Itoa(c.events),
		"-seed", strconv.FormatUint(c.seed, 10), "-fixture-cache", c.cache}, strings.Fields(c.relayArgs)...)
	relay, err := startRelay(ctx, relayBin, relayArgs...)
	if err != nil {
		return err
	}
	defer relay.Stop()
	progress("relay %s ready in %v", relay.URL, time.Since(relayStart).Round(time.Second))

	b := &bench{cfg: c, archiver: archiver, relay: relay.URL, tmp: tmp, n: int64(c.events)}
	rep, err := b.run(ctx)
	if err != nil {
		return err
	}
	if err := writeReport(os.Stdout, rep); err != nil {
		return err
	}
	if c.out != "" {
		f, err := os.Create(c.out)
		if err != nil {
			return err
		}
		if err := writeReport(f, rep); err != nil {
			_ = f.Close()
			return err
		}
		return f.Close()
	}
	return nil
}

// bench runs the scenarios against one relay.
type bench struct {
	cfg      config
	archiver string
	relay    string
	tmp      string
	n        int64 // events the relay serves
}

func (b *bench) run(ctx context.Context) (report, error) {
	load0 := loadAvg()
	limit, err := b.pageLimit(ctx)
	if err != nil {
		return report{}, err
	}
	oldest, newest, err := probeRange(ctx, b.relay, 30*time.Second)
	if err != nil {
		return report{}, fmt.Errorf("probe the relay's range: %w", err)
	}
	progress("relay serves created_at %d..%d, page limit %d", oldest, newest, limit)

	var fixed, verified row
	if !b.cfg.quick {
		if fixed, _, err = b.crawl(ctx, "(b) archiver 1x1", "fixed", fixedArgs, false); err != nil {
			return report{}, err
		}
	}
	adaptive, cLog, err := b.crawl(ctx, "(c) archiver adaptive", "adaptive", adaptiveArgs, false)
	if err != nil {
		return report{}, err
	}
	if !b.cfg.quick {
		if verified, _, err = b.crawl(ctx, "(f) archiver adaptive, verifying", "verified", adaptiveArgs, true); err != nil {
			return report{}, err
		}
		verified.Concurrency = "adaptive + verify pool"
	}
	settled, changed := cLog.Last()
	if changed {
		adaptive.Concurrency = fmt.Sprintf("%dx%d (last of %d changes)", settled.Conns, settled.Inflight, len(cLog.Changes()))
	} else {
		adaptive.Concurrency = "start values (no change logged)"
	}

	k, m := b.cfg.rawConns, b.cfg.rawInflight
	if k == 0 {
		k = max(1, settled.Conns)
	}
	if m == 0 {
		m = max(1, settled.Inflight)
	}
	rawOpts := rawOptions{URL: b.relay, Limit: limit, Since: oldest, Until: newest, PageTimeout: 30 * time.Second}
	raw1, frameBytes, err := b.raw(ctx, rawOpts, 1, 1)
	if err != nil {
		return report{}, err
	}
	rawK, _, err := b.raw(ctx, rawOpts, k, m)
	if err != nil {
		return report{}, err
	}
	fixed.Bytes, adaptive.Bytes = frameBytes, frameBytes
	fixed.Received, adaptive.Received, verified.Received = frameBytes, frameBytes, frameBytes
	if b.cfg.quick {
		return report{
			Header: []string{b.header(frameBytes, limit)},
			Rows:   []row{raw1, rawK, adaptive},
			Notes: []string{
				fmt.Sprintf("- (c)/(a %dx%d): %s of the relay's serving limit at the concurrency (c) settled on; (c)/(a 1x1): %s.",
					k, m, ratio(adaptive.rate(), rawK.rate()), ratio(adaptive.rate(), raw1.rate())),
				stagesNote, fmt.Sprintf("- The machine is shared with other work (1-minute load average %s at the start, %s at the end).", load0, loadAvg()),
			},
		}, nil
	}

	verify, poolN, poolTime, err := b.reprocess(ctx)
	if err != nil {
		return report{}, err
	}
	progress("verify loops (d') and (e) over %d events", b.cfg.verifyEvents)
	raws, evs, err := fixtureEvents(b.cfg.verifyEvents, b.cfg.seed, b.cfg.cache)
	if err != nil {
		return report{}, fmt.Errorf("verify loops: %w", err)
	}
	judged, err := verifyJudge(raws, evs)
	if err != nil {
		return report{}, fmt.Errorf("verify loop (d'): %w", err)
	}
	judgeRow := row{Scenario: "(d') verify: the judge alone", Events: int64(judged.Events), Elapsed: judged.Elapsed, CPU: judged.CPU, Concurrency: "1 goroutine"}
	base, err := verifyBaseline(evs)
	if err != nil {
		return report{}, fmt.Errorf("verify baseline (e): %w", err)
	}
	baseRow := row{Scenario: "(e) btcec verify baseline", Events: int64(base.Events), Elapsed: base.Elapsed, CPU: base.CPU, Concurrency: "1 goroutine"}

	procs := runtime.GOMAXPROCS(0)
	perCore := verify.rate() / float64(procs)
	rep := report{
		Header: []string{b.header(frameBytes, limit)},
		Rows:   []row{raw1, rawK, fixed, adaptive, verify, judgeRow, baseRow, verified},
		Notes: []string{
			fmt.Sprintf("- (c)/(a %dx%d): %s of the relay's serving limit at the concurrency (c) settled on; (c)/(a 1x1): %s.",
				k, m, ratio(adaptive.rate(), rawK.rate()), ratio(adaptive.rate(), raw1.rate())),
			fmt.Sprintf("- (c)/(b): %s times the one-connection, one-REQ crawl.", ratio(adaptive.rate(), fixed.rate())),
			"- (f) is the default `archiver crawl` (verification running during the crawl): its time is until every event is stored and verified.",
			fmt.Sprintf("- RSS at ~10%%, ~50%% and the end of the crawl: (b) %s, %s, %s MB; (c) %s, %s, %s MB (goal: no growth past ~100k events, peak <= 256 MB).",
				mib(fixed.RSS10), mib(fixed.RSS50), mib(fixed.RSSEnd), mib(adaptive.RSS10), mib(adaptive.RSS50), mib(adaptive.RSSEnd)),
			fmt.Sprintf("- Verify (d): %s events/s wall (process start to exit) = %s events/s per core (/ GOMAXPROCS %d), %s per CPU-second; the pool alone: %s events in %.1f s.",
				thousands(int64(verify.rate())), thousands(int64(perCore)), procs, thousands(int64(verify.perCPUSecond())), thousands(poolN), poolTime.Seconds()),
			fmt.Sprintf("- Baseline (e): btcec schnorr.ParsePubKey + ParseSignature + Verify, one goroutine: %s verifies/s wall, %s per CPU-second; (d)/(e) per core: %s wall, %s per CPU-second.",
				thousands(int64(baseRow.rate())), thousands(int64(baseRow.perCPUSecond())), ratio(perCore, baseRow.rate()), ratio(verify.perCPUSecond(), baseRow.perCPUSecond())),
			fmt.Sprintf("- Verifier (d'): parse, id and BIP-340 batch verification of the same events from their raw bytes, one goroutine, a fresh key cache (%d authors: all but their first events hit it): %s events/s wall, %s per CPU-second, %s times (e) per CPU-second. (d) adds the archive's reads and verdict writes.",
				authors(evs), thousands(int64(judgeRow.rate())), thousands(int64(judgeRow.perCPUSecond())), ratio(judgeRow.perCPUSecond(), baseRow.perCPUSecond())),
			"- events/s = the relay's events / wall seconds of the archiver process (start, crawl, flush, exit). MB/s counts the EVENT frames' bytes as the relay sent them (measured by (a)). CPU s is user + system time of the archiver process (for (a), of crawlbench; for (d') and (e), of their thread), so events/CPU s is less sensitive than events/s to other load on the machine. RSS in MiB: peak from the kernel's rusage, the others sampled from /proc every 200 ms.",
			stagesNote,
			fmt.Sprintf("- The machine is shared with other work (1-minute load average %s at the start, %s at the end): wall-clock numbers vary between runs.", load0, loadAvg()),
		},
	}
	if b.cfg.verbose {
		rep.Steps = cLog.Changes()
	}
	return rep, nil
}

// stagesNote explains the second table.
const stagesNote = "- Per event: CPU µs is user + system time of the process / events; receive, store, verify and other split the samples of its CPU profile (`--cpuprofile`) by the functions on each stack (store: rawstore and Pebble, flushes and compactions included; verify: lazyparse and bip340; receive: gws, the connection's frame handling and the frame scanner; other: crawl logic, Go's scheduler and GC); they add up to the profiled CPU, a little under the total. Written/received is the bytes the process wrote to disk (rusage) per byte of EVENT frames received; disk B/event is what the archive takes on disk at exit (WAL: write-ahead logs, each taking a memtable's size plus 10% on disk however little it holds: the live one, any the next open replays, and up to five spent ones Pebble keeps to reuse, a constant ~216 MB with 32 MiB memtables, not a share of the archive)."

// header is the report's first line.
func (b *bench) header(frameBytes int64, limit int) string {
	return fmt.Sprintf("crawlbench, %s: %s events (seed %d, %.0f MB of EVENT frames), page limit %d, loopback relay in its own process (%s); %s, %s, GOMAXPROCS %d.",
		time.Now().UTC().Format("2006-01-02"), thousands(b.n), b.cfg.seed, float64(frameBytes)/1e6, limit, relayProfile(b.cfg.relayArgs), cpuModel(), runtime.Version(), runtime.GOMAXPROCS(0))
}

// pageLimit is what the archiver pages with: -limit, else the relay's
// NIP-11 max_limit, else 500.
func (b *bench) pageLimit(ctx context.Context) (int, error) {
	if b.cfg.limit > 0 {
		return b.cfg.limit, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	doc, err := nip11.Fetch(ctx, http.DefaultClient, b.relay)
	if err == nil && doc.Limitation.MaxLimit > 0 {
		return doc.Limitation.MaxLimit, nil
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return 500, nil
}

// crawl runs one archiver crawl into a fresh directory and checks that it
// stored every event.
func (b *bench) crawl(ctx context.Context, name, dir string, scenario []string, verify bool) (row, *crawlLog, error) {
	data := filepath.Join(b.tmp, dir)
	prof := data + ".cpu.pprof"
	args := append([]string{"crawl", "--data", data, "--cpuprofile", prof}, crawlCommon...)
	if verify {
		args = slices.DeleteFunc(args, func(a string) bool { return a == "--no-verify" })
	}
	args = append(args, scenario...)
	args = append(args, strings.Fields(b.cfg.crawlArgs)...)
	args = append(args, b.relay)
	m, err := runMeasured(ctx, name, b.archiver, args, b.cfg.verbose && dir == "adaptive")
	if err != nil {
		return row{}, nil, err
	}
	st, err := b.stats(ctx, data)
	if err != nil {
		return row{}, nil, err
	}
	if st.Events != b.n {
		return row{}, nil, fmt.Errorf("%s stored %d events, the relay serves %d", name, st.Events, b.n)
	}
	if verify && (st.Valid != b.n || st.Pending != 0) {
		return row{}, nil, fmt.Errorf("%s verified %d of %d events (%d pending)", name, st.Valid, b.n, st.Pending)
	}
	r := row{
		Scenario: name, Events: b.n, Elapsed: m.Elapsed, CPU: m.CPU,
		PeakRSS: m.PeakRSS, RSS10: m.rssAt(b.n/10, b.n), RSS50: m.rssAt(b.n/2, b.n), RSSEnd: m.RSSEnd(),
		Concurrency: "1x1 (capped)", Written: m.Written,
	}
	if r.Stages, err = readStages(prof); err != nil {
		return row{}, nil, err
	}
	if r.Disk, err = measureDisk(data); err != nil {
		return row{}, nil, err
	}
	progress("%s: %d events in %.1f s, %.0f events/s, peak RSS %s MB", name, b.n, r.Elapsed.Seconds(), r.rate(), mib(r.PeakRSS))
	if dir == "fixed" && !b.cfg.keep {
		// Only (c)'s archive is verified; free the disk.
		if err := os.RemoveAll(data); err != nil {
			return row{}, nil, err
		}
	}
	return r, m.Log, nil
}

// raw runs the raw reader over conns x inflight and checks it read every
// event; it returns the row and the bytes of the relay's EVENT frames.
func (b *bench) raw(ctx context.Context, o rawOptions, conns, inflight int) (row, int64, error) {
	name := fmt.Sprintf("(a) raw reader %dx%d", conns, inflight)
	progress("%s: %d shards", name, conns*inflight*4)
	o.Conns, o.Inflight = conns, inflight
	start := time.Now()
	o.Progress = func(n int64) {
		fmt.Fprintf(os.Stderr, "  %s| %5.0fs: %d events read\n", name, time.Since(start).Seconds(), n)
	}
	res, err := readRaw(ctx, o)
	if err != nil {
		return row{}, 0, err
	}
	if res.Events != b.n {
		return row{}, 0, fmt.Errorf("%s read %d events, the relay serves %d", name, res.Events, b.n)
	}
	r := row{Scenario: name, Events: res.Events, Elapsed: res.Elapsed, CPU: res.CPU, Bytes: res.Bytes,
		Concurrency: fmt.Sprintf("%dx%d", conns, inflight)}
	progress("%s: %d events (%d boundary repeats) in %d pages, %.1f s, %.0f events/s", name, res.Events, res.Repeats, res.Pages, r.Elapsed.Seconds(), r.rate())
	return r, res.Bytes, nil
}

// reprocess verifies (c)'s archive and checks every event got a valid
// verdict.
func (b *bench) reprocess(ctx context.Context) (r row, poolN int64, poolTime time.Duration, err error) {
	data := filepath.Join(b.tmp, "adaptive")
	prof := data + ".reprocess.pprof"
	m, err := runMeasured(ctx, "(d) verify", b.archiver, []string{"reprocess", "--data", data, "--cpuprofile", prof}, false)
	if err != nil {
		return r, 0, 0, err
	}
	st, err := b.stats(ctx, data)
	if err != nil {
		return r, 0, 0, err
	}
	if st.Valid != b.n || st.Pending != 0 {
		return r, 0, 0, fmt.Errorf("after reprocess: %d valid, %d pending, want %d valid", st.Valid, st.Pending, b.n)
	}
	for _, l := range m.Log.Notable() {
		if n, d, ok := parseReprocess(l); ok {
			poolN, poolTime = n, d
		}
	}
	r = row{Scenario: "(d) verify: archiver reprocess", Events: b.n, Elapsed: m.Elapsed, CPU: m.CPU, PeakRSS: m.PeakRSS,
		RSS10: m.rssAt(b.n/10, b.n), RSS50: m.rssAt(b.n/2, b.n), RSSEnd: m.RSSEnd(), Concurrency: fmt.Sprintf("%d workers", runtime.GOMAXPROCS(0)),
		Written: m.Written}
	if r.Stages, err = readStages(prof); err != nil {
		return r, 0, 0, err
	}
	progress("(d) verify: %d events in %.1f s, %.0f events/s", b.n, r.Elapsed.Seconds(), r.rate())
	return r, poolN, poolTime, nil
}

// archiveStats is the part of `archiver stats --json` crawlbench checks.
type archiveStats struct {
	Events  int64 `json:"events"`
	Valid   int64 `json:"valid"`
	Pending int64 `json:"pending"`
}

func (b *bench) stats(ctx context.Context, data string) (archiveStats, error) {
	var st archiveStats
	out, err := runOutput(ctx, b.archiver, "stats", "--data", data, "--json")
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("archiver stats --json: %w", err)
	}
	return st, nil
}

// cpuModel names the processor, for the report's header.
// relayProfile names how the relay serves, for the report's header.
func relayProfile(args string) string {
	if strings.TrimSpace(args) == "" {
		return "serving as fast as loopback allows"
	}
	return "testrelay " + strings.Join(strings.Fields(args), " ")
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 64<<10))
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// loadAvg returns the 1-minute load average, "?" if unknown.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "crawlbench: "+format+"\n", args...)
}
