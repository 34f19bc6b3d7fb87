package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// progressEvery is how often a running scenario reports on stderr.
const progressEvery = 5 * time.Second

// sampleEvery is how often a child's VmRSS is read.
const sampleEvery = 200 * time.Millisecond

// command returns a child process of the benchmark: in its own process
// group (so a Ctrl-C reaches only crawlbench, which stops the children in
// order), killed if crawlbench dies, and sent SIGTERM (then SIGKILL after
// stopGrace) when ctx ends.
func command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = stopGrace
	return cmd
}

// stopGrace is how long a child may take to exit after SIGTERM.
const stopGrace = 10 * time.Second

// buildBinaries builds archiver and testrelay from the module at src into
// dir.
func buildBinaries(ctx context.Context, src, dir string) (archiver, relay string, err error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator), "./cmd/archiver", "./cmd/testrelay")
	cmd.Dir = src
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("go build: %w", err)
	}
	return filepath.Join(dir, "archiver"), filepath.Join(dir, "testrelay"), nil
}

// moduleRoot returns the directory of the main module go sees from the
// working directory.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module: run from the archiver repository or pass -src")
	}
	return filepath.Dir(mod), nil
}

// relayProc is the test relay running in its own process.
type relayProc struct {
	cmd *exec.Cmd
	URL string
}

// startRelay starts testrelay and waits for the URL it prints once its
// corpus is loaded (the first run signs the fixture: minutes for 1M).
func startRelay(ctx context.Context, bin string, args ...string) (*relayProc, error) {
	cmd := command(ctx, bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start testrelay: %w", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("testrelay exited before printing its URL: %w", err)
	}
	return &relayProc{cmd: cmd, URL: strings.TrimSpace(line)}, nil
}

// Stop asks the relay to exit (it prints its stats) and waits.
func (r *relayProc) Stop() {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.cmd.Wait()
	}()
	select {
	case <-done:
	case <-time.After(stopGrace):
		_ = r.cmd.Process.Kill()
		<-done
	}
}

// rssSample is one reading of a child's resident set.
type rssSample struct {
	At    time.Duration
	RSS   int64 // bytes
	Paged int64 // events paged by then, per the archiver's log
}

// measured is what runMeasured observed of one archiver run.
type measured struct {
	Elapsed time.Duration
	CPU     time.Duration // user + system
	PeakRSS int64         // bytes, the kernel's high-water mark (rusage)
	Written int64         // bytes written to disk (rusage block outputs)
	Samples []rssSample
	Log     *crawlLog
}

// rssAt returns the first sample at which at least events had been
// paged; without page logs, the sample at the same fraction of the run's
// time.
func (m *measured) rssAt(events, total int64) int64 {
	if len(m.Samples) == 0 {
		return 0
	}
	if m.Samples[len(m.Samples)-1].Paged > 0 {
		for _, s := range m.Samples {
			if s.Paged >= events {
				return s.RSS
			}
		}
		return m.Samples[len(m.Samples)-1].RSS
	}
	at := time.Duration(float64(m.Elapsed) * float64(events) / float64(max(total, 1)))
	for _, s := range m.Samples {
		if s.At >= at {
			return s.RSS
		}
	}
	return m.Samples[len(m.Samples)-1].RSS
}

// RSSEnd returns the last sample's RSS.
func (m *measured) RSSEnd() int64 {
	if len(m.Samples) == 0 {
		return 0
	}
	return m.Samples[len(m.Samples)-1].RSS
}

// runMeasured runs the archiver with args, reading its log, sampling its
// RSS and reporting progress on stderr under name. A non-zero exit is an
// error carrying the notable log lines.
func runMeasured(ctx context.Context, name, bin string, args []string, verbose bool) (*measured, error) {
	cmd := command(ctx, bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "crawlbench: %s: %s %s\n", name, filepath.Base(bin), strings.Join(args, " "))
	m := &measured{Log: &crawlLog{verbose: verbose}}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	pid := cmd.Process.Pid

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.Samples = sample(stop, pid, start, name, m.Log)
	}()

	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if echo := m.Log.add(time.Since(start), sc.Bytes()); echo != "" {
			fmt.Fprintf(os.Stderr, "  %s| %s\n", name, echo)
		}
	}
	_, _ = io.Copy(io.Discard, stderr) // a line over the buffer stops Scan
	err = cmd.Wait()
	m.Elapsed = time.Since(start)
	close(stop)
	wg.Wait()
	m.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		m.PeakRSS = ru.Maxrss << 10 // KiB on Linux
		m.Written = ru.Oublock * 512
	}
	if err != nil {
		return m, fmt.Errorf("%s: %w; its log said:\n%s", name, err, strings.Join(m.Log.Notable(), "\n"))
	}
	return m, nil
}

// sample reads pid's VmRSS every sampleEvery until stop is closed, and
// prints progress every progressEvery.
func sample(stop <-chan struct{}, pid int, start time.Time, name string, log *crawlLog) []rssSample {
	var out []rssSample
	path := "/proc/" + strconv.Itoa(pid) + "/status"
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	lastReport := start
	for {
		select {
		case <-stop:
			return out
		case now := <-t.C:
			rss, ok := readVmRSS(path)
			if !ok {
				continue // exited, or not yet exec'd
			}
			s := rssSample{At: now.Sub(start), RSS: rss, Paged: log.Paged()}
			out = append(out, s)
			if now.Sub(lastReport) >= progressEvery {
				lastReport = now
				line := fmt.Sprintf("%5.0fs: RSS %d MB", s.At.Seconds(), s.RSS>>20)
				if s.Paged > 0 {
					line += fmt.Sprintf(", %d events paged", s.Paged)
				}
				if ch, ok := log.Last(); ok {
					line += fmt.Sprintf(", concurrency %dx%d", ch.Conns, ch.Inflight)
				}
				fmt.Fprintf(os.Stderr, "  %s| %s\n", name, line)
			}
		}
	}
}

// cpuTime returns the CPU time (user + system) of this process, or with
// thread of the calling OS thread, as the kernel counts it.
func cpuTime(thread bool) time.Duration {
	who := syscall.RUSAGE_SELF
	if thread {
		who = syscall.RUSAGE_THREAD
	}
	var ru syscall.Rusage
	if syscall.Getrusage(who, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// readVmRSS reads the VmRSS line of a /proc/PID/status file.
func readVmRSS(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	return parseVmRSS(b)
}

// parseVmRSS finds "VmRSS:   123 kB" in a /proc/PID/status file; a zombie
// has none.
func parseVmRSS(status []byte) (int64, bool) {
	for line := range bytes.Lines(status) {
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) != 2 || f[1] != "kB" {
			return 0, false
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false
		}
		return n << 10, true
	}
	return 0, false
}

// runOutput runs a short archiver command and returns its stdout.
func runOutput(ctx context.Context, bin string, args ...string) ([]byte, error) {
	cmd := command(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, nil
}
