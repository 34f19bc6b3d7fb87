package config

import "github.com/nostr-archiver/archiver/crawl"

// AuthKeys loads the NIP-42 keys the configuration names: auth_key_file
// for every relay (else $ARCHIVER_AUTH_KEY, else the systemd credential
// nostr-auth-key), each relay's auth_key_file for that relay. It returns
// nil when there is no key. Validate does no I/O; this reads the files,
// and refuses one that every user may read. getenv is os.Getenv outside
// tests.
func (c *Config) AuthKeys(getenv func(string) string) (*crawl.AuthKeys, error) {
	var perRelay map[string]string
	for _, r := range c.Relays {
		if r.AuthKeyFile == "" {
			continue
		}
		if perRelay == nil {
			perRelay = map[string]string{}
		}
		perRelay[r.URL] = r.AuthKeyFile
	}
	return crawl.LoadAuthKeys(c.AuthKeyFile, perRelay, getenv)
}
