// Command archiver archives Nostr relays: crawl them into a local Pebble
// archive, verify what was stored, and export or inspect the result.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
)

const usage = `archiver: archive Nostr relays completely.

Usage:
  archiver run       [--config FILE] [--data DIR] [--listen ADDR] [--relay URL ...] [--serve ADDR] [--log-format auto|console|json]
  archiver crawl     [--data DIR] [--since T] [--until T] [--kinds K,K] [--authors HEX,HEX] [--no-verify] [--auth-key-file [RELAY_URL=]PATH] RELAY_URL...
  archiver sync      [--data DIR] [--since T] [--until T] RELAY_URL...
  archiver reprocess [--data DIR] [--all] [--index]
  archiver export    [--data DIR] [--out FILE] [--filter NIP01_FILTER_JSON [--latest]]
  archiver import    [--data DIR] [--name NAME] [--no-verify] FILE.jsonl|-
  archiver stats     [--data DIR] [--json]
  archiver check     [--data DIR]
  archiver relays    [--data DIR] [--json]
  archiver repair    [--data DIR] [--relay URL ...]
  archiver show      [--data DIR] [--json] EVENT_ID
  archiver serve     [--data DIR] [--listen ADDR]   (read-only relay; while the daemon writes the archive: run --serve)
  archiver submit    --nats URL [--id ID] [--mode backfill|live] [--kinds K,K] [--since T] [--until T] [--wait] RELAY_URL...
  archiver jobs      --nats URL [JOB_ID...]
  archiver version

Run "archiver COMMAND -h" for a command's flags.
`

func main() {
	useHugePages()
	os.Exit(dispatch(os.Args[1:]))
}

// dispatch runs the command named by args[0] and returns the exit code:
// 0 success, 1 failure, 2 usage error.
func dispatch(args []string) int {
	if len(args) < 1 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmds := map[string]func([]string) int{
		"run":       runDaemon,
		"crawl":     runCrawl,
		"reprocess": runReprocess,
		"export":    runExport,
		"import":    runImport,
		"stats":     runStats,
		"show":      runShow,
		"relays":    runRelays,
		"submit":    runSubmit,
		"jobs":      runJobs,
		"version":   runVersion,
		"check":     runCheck,
		"repair":    runRepair,
		"sync":      runSync,
		"serve":     runServe,
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(os.Stdout, usage)
		return 0
	case "-version", "--version":
		return runVersion(nil)
	}
	run, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "archiver: unknown command %q\n\n", args[0])
		fmt.Fprint(stderr, usage)
		return 2
	}
	return run(args[1:])
}

// fail prints err as one plain line naming the command, for a person to
// read (no log fields, no stack), and returns exit code 1.
func fail(cmd string, err error) int {
	fmt.Fprintf(stderr, "archiver %s: %s\n", cmd, oneLine(err.Error()))
	return 1
}

// usageError prints a usage error the same way and returns exit code 2.
func usageError(what string, err error) int {
	fmt.Fprintf(stderr, "archiver: %s: %s\n", what, oneLine(err.Error()))
	return 2
}

// oneLine joins a multi-line message (errors.Join) with "; ".
func oneLine(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ")
}

func runVersion(args []string) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: archiver version\n\nPrints the module version and the VCS revision the binary was built from.")
	}
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	fmt.Fprintln(os.Stdout, versionString())
	return 0
}

// versionString is the module version and the VCS revision the binary was
// built from, as the Go toolchain recorded them.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "archiver (no build information)"
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	out := "archiver " + bi.Main.Version
	switch {
	case rev == "":
		out += " (no VCS revision)"
	default:
		if dirty {
			rev += "+modified"
		}
		out += " (" + rev
		if at != "" {
			out += " " + at
		}
		out += ")"
	}
	return out + " " + bi.GoVersion
}
