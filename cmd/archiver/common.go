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
	cpuProfile string
	hotBytes   int // rawstore.Options.HotBytes: set by commands that verify while they ingest
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.data, "data", defaultDataDir, "archive directory")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the command to this file")
}

// profile starts the CPU profile asked for, if any; the returned func
// stops it.
func (c *common) profile() (func(), error) {
	if c.cpuProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(c.cpuProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// logger returns a JSON logger on stderr. Sampling is off: the crawl's
// messages are few per page, and sampling by message text would drop
// different relays' errors together.
func (c *common) logger() (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(c.logLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Sampling = nil
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	return cfg.Build()
}

// open parses the command's flags (no positional arguments), builds the
// logger and opens the archive; code is the exit code when it fails.
func (c *common) open(fs *flag.FlagSet, args []string) (log *zap.Logger, store *rawstore.Store, code int) {
	if rest, err := parseInterspersed(fs, args); err != nil || len(rest) > 0 {
		return nil, nil, usageError(fs.Name(), fmt.Errorf("unexpected arguments %q", rest))
	}
	log, err := c.logger()
	if err != nil {
		return nil, nil, usageError("--log-level", err)
	}
	store, err = c.openStore(log)
	if err != nil {
		log.Error("cannot open archive", zap.String("dir", c.data), zap.Error(err))
		return nil, nil, 1
	}
	return log, store, 0
}

func (c *common) openStore(log *zap.Logger) (*rawstore.Store, error) {
	if err := os.MkdirAll(c.data, 0o755); err != nil {
		return nil, err
	}
	return rawstore.Open(rawstore.Options{Dir: c.data, Logger: log, HotBytes: c.hotBytes})
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
