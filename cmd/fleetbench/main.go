// Command fleetbench measures `archiver run` over many relays, most of
// them dead, on loopback: it serves the live relays itself (testrelay
// instances on distinct loopback addresses, each a random subset of one
// pool of signed events, so that events overlap), names the dead ones on closed ports of distinct
// loopback addresses (127.x.y.z:9, refused at once), starts the archiver
// binary on a configuration listing them all, and reports when the sweep
// is done (every relay dialed, every live relay's backfill complete) with
// the daemon's peak RSS, file descriptors and goroutines, the delay before
// each live relay's first REQ, and the archive's bytes per event and per
// sighting. One line of Markdown table per run.
//
//	go build -o /tmp/archiver ./cmd/archiver
//	go run ./cmd/fleetbench -archiver /tmp/archiver -relays 10,1000,10000
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/nostr-archiver/archiver/daemon"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/testrelay"
)

type options struct {
	archiver       string
	deadShare      float64
	perRelay, pool int
	maxDials, rate int
	timeout        time.Duration
	legacy         bool // an archiver before the scheduler: no dial limits in its configuration
	// logFile and cpuProfile, when set, get the daemon's log and CPU
	// profile of each run (suffixed with its relay count).
	logFile, logLevel, cpuProfile string
}

func main() {
	var o options
	sizes := flag.String("relays", "10,1000", "relay counts to run, comma-separated")
	flag.StringVar(&o.archiver, "archiver", "archiver", "the archiver binary")
	flag.Float64Var(&o.deadShare, "dead", 0.7, "share of dead relays")
	flag.IntVar(&o.perRelay, "events", 20, "events per live relay")
	flag.IntVar(&o.pool, "pool", 2000, "distinct events the live relays draw from")
	flag.IntVar(&o.maxDials, "max-dials", 256, "limits.max_dials")
	flag.IntVar(&o.rate, "dials-per-second", 500, "limits.dials_per_second")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "give up a run after this long")
	flag.StringVar(&o.logFile, "log", "", "copy the daemon's log (at -log-level) to this file")
	flag.StringVar(&o.logLevel, "log-level", "warn", "the daemon's log_level")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "the daemon's CPU profile (archiver run --cpuprofile)")
	flag.BoolVar(&o.legacy, "legacy", false, "the archiver predates limits.max_dials (compare before and after)")
	flag.Parse()
	pool, err := signPool(o.pool)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(1)
	}
	fmt.Println("| relays | live | sweep | peak RSS | peak fds | peak goroutines | first REQ p50 / max | disk/event | disk/sighting | warn lines |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err == nil {
			err = bench(o, n, pool)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "fleetbench: %s relays: %v\n", s, err)
			os.Exit(1)
		}
	}
}

func signPool(n int) ([]testrelay.Item, error) {
	sk, err := btcec.NewPrivateKey()
	if err != nil {
		return nil, err
	}
	out := make([]testrelay.Item, n)
	for i := range out {
		e := &event.Event{CreatedAt: 1_700_000_000 + int64(i), Kind: 1, Content: fmt.Sprintf("fleet bench note %d", i)}
		if out[i], err = testrelay.Signed(sk, e); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type result struct {
	relays, live           int
	sweep                  time.Duration
	rssKiB, fds, routines  int64
	firstP50, firstMax     time.Duration
	perEvent, perSighting  float64
	events, sightings, dsk int64
}

func bench(o options, n int, pool []testrelay.Item) error {
	nLive := max(1, n-int(float64(n)*o.deadShare))
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	live := make([]*testrelay.Relay, nLive)
	var urls []string
	sightings := int64(0)
	for i := range live {
		// Each on its own loopback address: the daemon serves one backfill
		// per host at a time, and real relays are on distinct hosts.
		addr := fmt.Sprintf("127.%d.%d.%d:0", 200+i/(254*256), i/254%256, 1+i%254)
		r, err := testrelay.New(testrelay.Options{Addr: addr, SupportCount: true})
		if err != nil {
			return err
		}
		defer r.Close()
		for _, k := range rng.Perm(len(pool))[:o.perRelay] {
			r.Add(pool[k])
		}
		sightings += int64(o.perRelay)
		live[i] = r
		urls = append(urls, r.URL())
	}
	for i := range n - nLive {
		urls = append(urls, fmt.Sprintf("ws://127.%d.%d.%d:9", 1+i/(254*256), i/254%256, 1+i%254))
	}
	rng.Shuffle(len(urls), func(i, j int) { urls[i], urls[j] = urls[j], urls[i] })

	dir, err := os.MkdirTemp("", "fleetbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	var conf strings.Builder
	fmt.Fprintf(&conf, "data_dir = %q\nlisten = %q\nlog_level = %q\n[limits]\nmin_free_disk_bytes = 0\n", filepath.Join(dir, "data"), addr, o.logLevel)
	if !o.legacy {
		fmt.Fprintf(&conf, "max_dials = %d\ndials_per_second = %d\n", o.maxDials, o.rate)
	}
	for _, u := range urls {
		fmt.Fprintf(&conf, "[[relay]]\nurl = %q\n", u)
	}
	confPath := filepath.Join(dir, "archiver.toml")
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o600); err != nil {
		return err
	}
	args := []string{"run", "--config", confPath, "--log-format", "json"}
	if o.cpuProfile != "" {
		args = append(args, "--cpuprofile", fmt.Sprintf("%s.%d", o.cpuProfile, n))
	}
	cmd := exec.Command(o.archiver, args...)
	logLines := &lineCounter{}
	cmd.Stderr = logLines
	if o.logFile != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", o.logFile, n))
		if err != nil {
			return err
		}
		defer f.Close()
		cmd.Stderr = io.MultiWriter(logLines, f)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	res := result{relays: n, live: nLive, sightings: sightings}
	first := make([]time.Duration, nLive)
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	var lastStatus time.Time
	for ; ; time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-exited:
			return fmt.Errorf("archiver exited: %v", err)
		case <-ctx.Done():
			return errors.New("timed out")
		default:
		}
		for i, r := range live {
			if first[i] == 0 && r.Stats().REQs > 0 {
				first[i] = time.Since(start)
			}
		}
		sampleProc(cmd.Process.Pid, &res)
		if time.Since(lastStatus) < 2*time.Second {
			continue
		}
		lastStatus = time.Now()
		sampleGoroutines(addr, &res) // a scrape costs the daemon more than /proc
		if st, err := status(addr); err == nil && swept(st, nLive) {
			res.sweep = time.Since(start)
			res.events = st.Events
			break
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	<-exited
	res.dsk = du(filepath.Join(dir, "data"))
	slices.Sort(first)
	res.firstP50, res.firstMax = first[len(first)/2], first[len(first)-1]
	res.perEvent = float64(res.dsk) / float64(max(res.events, 1))
	res.perSighting = float64(res.dsk) / float64(max(res.sightings, 1))
	fmt.Printf("| %d | %d | %.1f s | %.0f MiB | %d | %d | %.1f s / %.1f s | %.0f B | %.0f B | %d |\n",
		res.relays, res.live, res.sweep.Seconds(), float64(res.rssKiB)/1024, res.fds, res.routines,
		res.firstP50.Seconds(), res.firstMax.Seconds(), res.perEvent, res.perSighting, logLines.n.Load())
	return nil
}

// swept: no relay waits for its first dial or is being dialed, and every
// live relay's backfill is complete.
func swept(st *daemon.Status, live int) bool {
	if st.Schedule["due"] > 0 || st.Schedule["probing"] > 0 {
		return false
	}
	done := 0
	for _, r := range st.Relays {
		if r.BackfillComplete {
			done++
		}
	}
	return done >= live && st.Pending == 0
}

var client = &http.Client{Timeout: 30 * time.Second}

func status(addr string) (*daemon.Status, error) {
	resp, err := client.Get("http://" + addr + "/status")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st daemon.Status
	return &st, json.NewDecoder(resp.Body).Decode(&st)
}

// sampleProc keeps the peaks of the daemon's RSS and descriptors.
func sampleProc(pid int, r *result) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				r.rssKiB = max(r.rssKiB, kb)
			}
		}
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		r.fds = max(r.fds, int64(len(ents)))
	}
}

// sampleGoroutines keeps the peak of the daemon's goroutines.
func sampleGoroutines(addr string, r *result) {
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			g, _ := strconv.ParseFloat(v, 64)
			r.routines = max(r.routines, int64(g))
		}
	}
}

// lineCounter counts the lines the daemon logs (at warn and above).
type lineCounter struct{ n atomic.Int64 }

func (c *lineCounter) Write(p []byte) (int, error) {
	c.n.Add(int64(bytes.Count(p, []byte("\n"))))
	return len(p), nil
}

func du(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
