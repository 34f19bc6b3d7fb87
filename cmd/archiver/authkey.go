package main

import (
	"os"
	"strings"

	"github.com/nostr-archiver/archiver/crawl"
)

// authKeyFileHelp documents --auth-key-file.
const authKeyFileHelp = "NIP-42 key (hex or nsec, in a file only its owner may read) for relays that ask for AUTH: PATH for every relay, " +
	"or RELAY_URL=PATH for one relay (repeatable). Without it, $" + crawl.EnvAuthKey + " or the systemd credential " +
	crawl.AuthKeyCredential + " is used if set"

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// loadAuthKeys loads the keys --auth-key-file names, falling back to the
// environment and the systemd credential (see crawl.LoadAuthKeys).
func loadAuthKeys(flags []string) (*crawl.AuthKeys, error) {
	file, perRelay, err := crawl.ParseAuthKeyFlags(flags)
	if err != nil {
		return nil, err
	}
	return crawl.LoadAuthKeys(file, perRelay, os.Getenv)
}

// authHints say what to try next after a relay's NIP-42 refusal.
var authHints = map[string]string{
	crawl.FinishAuthRequired: "the relay serves authenticated clients only: give a key with --auth-key-file PATH (or $" + crawl.EnvAuthKey + ")",
	crawl.FinishRestricted:   "the relay does not serve this key: ask its operator to allow the pubkey named above, or give another key",
	crawl.FinishAuthRejected: "the relay refused the AUTH event itself: check that the relay URL is the one it knows itself by, and this machine's clock",
}
