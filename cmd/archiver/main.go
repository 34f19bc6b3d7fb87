// Command archiver archives Nostr relays: crawl them into a local Pebble
// archive, verify what was stored, and export or inspect the result.
package main

import (
	"fmt"
	"os"
)

const usage = `archiver: archive Nostr relays completely.

Usage:
  archiver run       [--config FILE] [--data DIR] [--listen ADDR] [--relay URL ...]
  archiver crawl     [--data DIR] [--since T] [--until T] [--no-verify] RELAY_URL...
  archiver reprocess [--data DIR] [--all]
  archiver export    [--data DIR] [--out FILE]
  archiver stats     [--data DIR] [--json]
  archiver submit    --nats URL [--id ID] [--mode backfill|live] [--kinds K,K] [--since T] [--until T] [--wait] RELAY_URL...
  archiver jobs      --nats URL [JOB_ID...]

Run "archiver COMMAND -h" for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmds := map[string]func([]string) int{
		"run":       runDaemon,
		"crawl":     runCrawl,
		"reprocess": runReprocess,
		"export":    runExport,
		"stats":     runStats,
		"submit":    runSubmit,
		"jobs":      runJobs,
	}
	run, ok := cmds[os.Args[1]]
	if !ok {
		if os.Args[1] != "-h" && os.Args[1] != "--help" && os.Args[1] != "help" {
			fmt.Fprintf(os.Stderr, "archiver: unknown command %q\n\n", os.Args[1])
		}
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	os.Exit(run(os.Args[2:]))
}
