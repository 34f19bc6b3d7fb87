package crawl

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nostr-archiver/archiver/bip340"
)

// Where a NIP-42 key comes from when no key file is named: the
// environment, then a systemd credential (LoadCredential=nostr-auth-key:...).
const (
	EnvAuthKey        = "ARCHIVER_AUTH_KEY"
	AuthKeyCredential = "nostr-auth-key"
)

// AuthKeys are the keys a crawl answers NIP-42 challenges with: one key
// for every relay, and keys for some relays that take precedence. A relay
// with no key is never authenticated to.
type AuthKeys struct {
	Default  *bip340.PrivateKey
	PerRelay map[string]*bip340.PrivateKey // by normalized URL
}

// For returns the key for relay (a normalized URL), or nil.
func (a *AuthKeys) For(relay string) *bip340.PrivateKey {
	if a == nil {
		return nil
	}
	if k, ok := a.PerRelay[relay]; ok {
		return k
	}
	return a.Default
}

// ParseAuthKey reads a secret key written as 64 hex digits or as a NIP-19
// nsec, surrounding whitespace ignored. Its errors never quote the text.
func ParseAuthKey(s string) (*bip340.PrivateKey, error) {
	s = strings.TrimSpace(s)
	var b []byte
	switch {
	case strings.HasPrefix(strings.ToLower(s), "nsec1"):
		hrp, data, err := bech32Decode(s)
		if err != nil {
			return nil, fmt.Errorf("nsec: %w", err)
		}
		if hrp != "nsec" || len(data) != 32 {
			return nil, errors.New("nsec: does not hold a 32-byte key")
		}
		b = data
	case len(s) == 64:
		var err error
		if b, err = hex.DecodeString(s); err != nil {
			return nil, errors.New("not 64 hex digits")
		}
	case strings.HasPrefix(strings.ToLower(s), "npub1"):
		return nil, errors.New("this is a public key (npub); the secret key (nsec or hex) is needed to sign")
	default:
		return nil, fmt.Errorf("want 64 hex digits or an nsec1... key, got %d characters", len(s))
	}
	k, err := bip340.NewPrivateKey(b)
	clear(b)
	if err != nil {
		return nil, err
	}
	return k, nil
}

// maxKeyFile bounds what is read from a key file: a key is at most 64
// characters and a newline or two.
const maxKeyFile = 4 << 10

// ReadAuthKeyFile reads a key file (hex or nsec, see ParseAuthKey). A file
// that every user of the machine may read is refused: the key would be
// everyone's.
func ReadAuthKeyFile(path string) (*bip340.PrivateKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth key file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("auth key file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("auth key file %s: not a regular file", path)
	}
	if st.Mode().Perm()&0o004 != 0 {
		return nil, fmt.Errorf("auth key file %s is readable by every user (mode %04o): run `chmod 600 %s` and try again",
			path, st.Mode().Perm(), path)
	}
	buf := make([]byte, maxKeyFile+1)
	n, err := f.Read(buf)
	defer clear(buf)
	if err != nil {
		return nil, fmt.Errorf("auth key file %s: %w", path, err)
	}
	if n > maxKeyFile {
		return nil, fmt.Errorf("auth key file %s: larger than %d bytes, not a key", path, maxKeyFile)
	}
	k, err := ParseAuthKey(string(buf[:n]))
	if err != nil {
		return nil, fmt.Errorf("auth key file %s: %w", path, err)
	}
	return k, nil
}

// LoadAuthKeys loads the keys of a crawl: defaultFile (if set) for every
// relay, otherwise the key in $ARCHIVER_AUTH_KEY, otherwise the systemd
// credential $CREDENTIALS_DIRECTORY/nostr-auth-key if present; and
// perRelay (relay URL -> key file), which overrides the default for its
// relays. It returns nil keys when there are none. getenv is os.Getenv
// outside tests.
func LoadAuthKeys(defaultFile string, perRelay map[string]string, getenv func(string) string) (*AuthKeys, error) {
	a := &AuthKeys{}
	var err error
	switch {
	case defaultFile != "":
		if a.Default, err = ReadAuthKeyFile(defaultFile); err != nil {
			return nil, err
		}
	case getenv(EnvAuthKey) != "":
		if a.Default, err = ParseAuthKey(getenv(EnvAuthKey)); err != nil {
			return nil, fmt.Errorf("$%s: %w", EnvAuthKey, err)
		}
	case getenv("CREDENTIALS_DIRECTORY") != "":
		path := filepath.Join(getenv("CREDENTIALS_DIRECTORY"), AuthKeyCredential)
		if _, statErr := os.Stat(path); statErr == nil {
			if a.Default, err = ReadAuthKeyFile(path); err != nil {
				return nil, err
			}
		}
	}
	for relay, path := range perRelay {
		u, err := NormalizeURL(relay)
		if err != nil {
			return nil, fmt.Errorf("auth key for %q: %w", relay, err)
		}
		k, err := ReadAuthKeyFile(path)
		if err != nil {
			return nil, fmt.Errorf("auth key for %s: %w", u, err)
		}
		if a.PerRelay == nil {
			a.PerRelay = map[string]*bip340.PrivateKey{}
		}
		a.PerRelay[u] = k
	}
	if a.Default == nil && a.PerRelay == nil {
		return nil, nil
	}
	return a, nil
}

// ParseAuthKeyFlags splits --auth-key-file values into the default key
// file (a bare PATH; at most one) and per-relay files (RELAY_URL=PATH).
func ParseAuthKeyFlags(values []string) (defaultFile string, perRelay map[string]string, err error) {
	for _, v := range values {
		lower := strings.ToLower(v)
		relay, path, ok := strings.Cut(v, "=")
		if ok && (strings.HasPrefix(lower, "ws://") || strings.HasPrefix(lower, "wss://")) {
			if path == "" {
				return "", nil, fmt.Errorf("--auth-key-file %s: no path after =", relay)
			}
			u, err := NormalizeURL(relay)
			if err != nil {
				return "", nil, fmt.Errorf("--auth-key-file: %w", err)
			}
			if perRelay == nil {
				perRelay = map[string]string{}
			}
			if _, dup := perRelay[u]; dup {
				return "", nil, fmt.Errorf("--auth-key-file: two key files for %s", u)
			}
			perRelay[u] = path
			continue
		}
		if v == "" {
			return "", nil, errors.New("--auth-key-file: empty path")
		}
		if defaultFile != "" {
			return "", nil, errors.New("--auth-key-file: two key files for every relay; give RELAY_URL=PATH for a relay's own key")
		}
		defaultFile = v
	}
	return defaultFile, perRelay, nil
}
