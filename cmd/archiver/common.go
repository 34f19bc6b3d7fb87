package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/rawstore"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// defaultDataDir is where the archive lives when --data is not given.
const defaultDataDir = "./archive"

// common flags of every command.
type common struct {
	data       string
	logLevel   string
	logFormat  string
	cpuProfile string
	hotBytes   int             // rawstore.Options.HotBytes: set by commands that verify while they ingest
	cache      config.ByteSize // rawstore.Options.CacheSize: a flag of serve; 0 is the store's default
	// access is how the command opens the archive: commands that only
	// read never write, and nothing but a crawl creates an archive.
	access access
}

type access int

const (
	accessCreate   access = iota // crawl, run: create the archive if needed
	accessExisting               // reprocess: write, but only to an archive
	accessReadOnly               // stats, export, check: never write
)

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.data, "data", defaultDataDir, "archive directory")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.logFormat, "log-format", "auto", logFormatHelp)
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the command to this file")
}

// profile starts the CPU profile asked for, if any; the returned func
// stops it.
func (c *common) profile() (func(), error) { return startCPUProfile(c.cpuProfile) }

// startCPUProfile writes a CPU profile to path ("": none) until the
// returned func is called.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// logFormatHelp documents --log-format.
const logFormatHelp = "log format: console (lines for people), json (for services), or auto: console on a terminal, json otherwise and under systemd"

// logger returns the logger of a command, writing to stderr (see
// newLogger).
func (c *common) logger() (*zap.Logger, error) { return newLogger(c.logLevel, c.logFormat) }

// newLogger builds a logger on stderr in format: "console" (one readable
// line per entry), "json" (one object per line, for services and log
// collectors), or "auto", which is console on a terminal and json
// otherwise or under systemd (JOURNAL_STREAM is set). No entry carries a
// stack trace: the messages say what happened. Sampling is off: the
// crawl's messages are few per page, and sampling by message text would
// drop different relays' errors together.
func newLogger(level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	if format == "auto" || format == "" {
		format = "json"
		if stderr.tty && os.Getenv("JOURNAL_STREAM") == "" {
			format = "console"
		}
	}
	var enc zapcore.Encoder
	switch format {
	case "json":
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05")
		ec.CallerKey, ec.StacktraceKey = "", ""
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, fmt.Errorf("--log-format %q: want auto, console or json", format)
	}
	return zap.New(zapcore.NewCore(enc, stderr, lvl)), nil
}

// open parses the command's flags (no positional arguments), builds the
// logger and opens the archive. When store is nil, code is the exit code:
// 0 after --help, 2 on a usage error, 1 when the archive cannot be opened.
func (c *common) open(fs *flag.FlagSet, args []string) (log *zap.Logger, store *rawstore.Store, code int) {
	if code, ok := parseNoArgs(fs, args); !ok {
		return nil, nil, code
	}
	log, err := c.logger()
	if err != nil {
		return nil, nil, usageError(fs.Name(), err)
	}
	store, err = c.openStore(log)
	if err != nil {
		return nil, nil, fail(fs.Name(), openError(c.data, err))
	}
	return log, store, 0
}

// parseNoArgs parses a command's flags where no positional argument is
// expected; when !ok the command returns code (0 after --help).
func parseNoArgs(fs *flag.FlagSet, args []string) (code int, ok bool) {
	rest, err := parseInterspersed(fs, args)
	switch {
	case err != nil:
		return flagExit(err), false
	case len(rest) > 0:
		return usageError(fs.Name(), fmt.Errorf("unexpected arguments %q", rest)), false
	}
	return 0, true
}

// flagExit is the exit code after a flag parse error, which the flag
// package has already printed with the usage: 0 for -h/--help, else 2.
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// parseInterspersed parses flags that may come before, between or after
// the positional arguments, as users type them.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(stderr)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func (c *common) openStore(log *zap.Logger) (*rawstore.Store, error) {
	if c.access == accessCreate {
		if err := os.MkdirAll(c.data, 0o755); err != nil {
			return nil, err
		}
	}
	return rawstore.Open(rawstore.Options{Dir: c.data, Logger: log, HotBytes: c.hotBytes, CacheSize: int64(c.cache),
		ReadOnly: c.access == accessReadOnly, NoCreate: c.access != accessCreate})
}

// openError says why the archive in dir could not be opened; the store's
// own sentinels already name the directory and what to do is plain.
func openError(dir string, err error) error {
	switch {
	case errors.Is(err, rawstore.ErrNotArchive):
		return fmt.Errorf("%w; check --data (a crawl or run creates an archive)", err)
	case errors.Is(err, rawstore.ErrInUse):
		return fmt.Errorf("%w; stop it first (or read with stats/export, which share the archive with other readers only)", err)
	}
	return fmt.Errorf("cannot open archive %s: %w", dir, err)
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// parseTime accepts unix seconds, RFC 3339, a date (2006-01-02), or a
// duration before now ("24h", "7d").
func parseTime(s string, now time.Time) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return 0, errors.New("negative timestamp")
		}
		return n, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.Unix(), nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t.Unix(), nil
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(d); err == nil && n >= 0 {
			return now.Add(-time.Duration(n) * 24 * time.Hour).Unix(), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d).Unix(), nil
	}
	return 0, fmt.Errorf("time %q: want unix seconds, RFC 3339, YYYY-MM-DD, or a duration ago like 24h or 7d", s)
}
