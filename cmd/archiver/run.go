package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/daemon"
	"go.uber.org/zap"
)

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runDaemon(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var (
		path   = fs.String("config", "", "TOML configuration file (see configs/archiver.toml); flags override it")
		format = fs.String("log-format", "auto", logFormatHelp)
		o      config.Overrides
		relays multiFlag
		cpu    = fs.String("cpuprofile", "", "write a CPU profile of the daemon to this file (until it stops)")
	)
	fs.StringVar(&o.DataDir, "data", "", "archive directory (overrides data_dir)")
	fs.StringVar(&o.Listen, "listen", "", "address of /metrics, /healthz and /status (overrides listen)")
	fs.StringVar(&o.LogLevel, "log-level", "", "debug, info, warn or error (overrides log_level)")
	fs.StringVar(&o.NATSURL, "nats", "", "NATS server URL (overrides nats.url)")
	fs.Var(&relays, "relay", "a relay to keep archived (repeatable; added to the file's relays)")
	fs.StringVar(&o.ServeListen, "serve", "", "also serve the archive as a read-only Nostr relay on this address (overrides serve.listen)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: archiver run [--config FILE] [--data DIR] [--listen ADDR] [--relay URL ...] [--serve ADDR]\n\nKeeps relays archived until SIGTERM; SIGHUP reloads the configuration.")
		fs.PrintDefaults()
	}
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	o.Relays = relays
	load := func() (*config.Config, error) { return config.Load(*path, o) }
	cfg, err := load()
	if err != nil {
		// Exit 2: systemd's RestartPreventExitStatus, no restart loop on a
		// bad file. Every problem on a line of its own.
		fmt.Fprintf(stderr, "archiver run: configuration: %v\n", err)
		return 2
	}
	log, err := newLogger(cfg.LogLevel, *format)
	if err != nil {
		return usageError("run", err)
	}
	defer log.Sync() //nolint:errcheck // stderr cannot be synced

	stopProfile, err := startCPUProfile(*cpu)
	if err != nil {
		return fail("run", err)
	}
	defer stopProfile()
	d, err := daemon.New(daemon.Options{Config: cfg, Reload: load, Logger: log})
	if err != nil {
		return fail("run", fmt.Errorf("cannot start: %w", err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reloading the configuration")
				_ = d.Reload()
			}
		}
	}()
	if err := d.Run(ctx); err != nil {
		log.Error("stopped with an error", zap.Error(err))
		return 1
	}
	return 0
}
