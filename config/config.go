// Package config is the configuration of the archiver daemon
// (`archiver run`): a TOML file, overridden by command-line flags.
//
// Defaults live in one place, defaults.go (Defaults, DefaultRelay,
// DefaultNATS); configs/README.md tables every key and configs/archiver.toml
// is a complete commented example (tests keep both in step with this
// package). Loading is strict: a key this package does not know is an
// error naming it, and Validate reports every invalid value at once, each
// prefixed with its key ("relay[2].url: ...", relays counted from 0).
package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// Config is the whole file. The zero value is not useful: start from
// Defaults (Load and Parse do).
type Config struct {
	// DataDir is the archive directory (the Pebble store). Default
	// "/var/lib/archiver", systemd's StateDirectory=archiver.
	DataDir string `toml:"data_dir"`
	// Listen is the host:port of the HTTP server for /metrics, health and
	// status. Default "127.0.0.1:9477". Port 0 picks a free port.
	Listen string `toml:"listen"`
	// LogLevel is debug, info, warn or error. Default "info".
	LogLevel string `toml:"log_level"`

	Limits Limits `toml:"limits"`

	// Relays are the [[relay]] entries, archived in this order. At least
	// one relay or a [nats] section is required.
	Relays []Relay `toml:"relay"`

	// NATS is the [nats] section, nil when the file has none: the daemon
	// then archives only its own relays.
	NATS *NATS `toml:"nats"`
}

// Limits bound what the daemon may use; they are ceilings, the adaptive
// controller decides what it actually uses below them.
type Limits struct {
	// MaxConnections caps WebSocket connections over all relays. Default 64.
	MaxConnections int `toml:"max_connections"`
	// MaxConnectionsPerRelay caps connections to one relay. Default 4.
	MaxConnectionsPerRelay int `toml:"max_connections_per_relay"`
	// MaxInflightPerConn caps REQs in flight on one connection. Default 4.
	MaxInflightPerConn int `toml:"max_inflight_per_conn"`
	// VerifyWorkers is the size of the verification pool; 0, the default,
	// means one per CPU (see Workers).
	VerifyWorkers int `toml:"verify_workers"`
	// MaxFrameBytes is the largest WebSocket message accepted from a
	// relay. Default 8MiB; 64KiB to 64MiB.
	MaxFrameBytes ByteSize `toml:"max_frame_bytes"`
	// PageTimeout is how long a page (REQ to EOSE) may go without a frame
	// before it counts as failed. Default "15s".
	PageTimeout Duration `toml:"page_timeout"`
	// MinFreeDiskBytes is the disk floor: crawling pauses while the data
	// directory's file system has less free space (see package diskguard
	// for the hysteresis). 0 disables the guard. Default 1GiB.
	MinFreeDiskBytes ByteSize `toml:"min_free_disk_bytes"`
	// StopTimeout bounds a graceful stop (drain pages, flush, close the
	// store). Default "60s"; systemd's TimeoutStopSec must exceed it.
	StopTimeout Duration `toml:"stop_timeout"`
}

// Workers resolves VerifyWorkers: the configured count, or one per CPU
// when it is 0.
func (l Limits) Workers() int {
	if l.VerifyWorkers > 0 {
		return l.VerifyWorkers
	}
	return runtime.NumCPU()
}

// Relay is one [[relay]] entry: what to archive from one relay.
type Relay struct {
	// URL is ws://host[:port][/path], wss://..., or a bare host meaning
	// wss://. Required; Load and Parse store it normalized (lowercase
	// host, no trailing slash), and two entries may not name one relay.
	URL string `toml:"url"`
	// Since is the oldest created_at to archive; unset (0) means from the
	// beginning.
	Since Timestamp `toml:"since,omitempty"`
	// Until is the newest created_at to archive; unset (0) means now, and
	// then on with Live. Setting it requires live = false.
	Until Timestamp `toml:"until,omitempty"`
	// Kinds, when set, restricts the archive to these event kinds (0..65535).
	Kinds []int `toml:"kinds,omitempty"`
	// Authors, when set, restricts the archive to these pubkeys (64
	// lowercase hex characters each).
	Authors []string `toml:"authors,omitempty"`
	// Live keeps the relay tailed after the backfill: a subscription for
	// new events plus a periodic catch-up. Default true.
	Live bool `toml:"live"`
	// CatchupInterval is how often a live relay re-pages its recent past,
	// for events the live subscription missed (disconnects, backdated
	// events). Default "1h".
	CatchupInterval Duration `toml:"catchup_interval"`
	// TailOverlap is how far before the newest archived created_at the
	// live subscription and each catch-up start. Default "10m".
	TailOverlap Duration `toml:"tail_overlap"`
}

// NATS is the optional [nats] section: the job queue of a fleet of
// archivers (JetStream). Validate checks its values, not the server.
type NATS struct {
	// URL is the server, or several separated by commas:
	// nats://, tls://, ws:// or wss://, or a bare host[:port] (nats://).
	// Required in a [nats] section.
	URL string `toml:"url"`
	// Stream is the JetStream work-queue stream. Default "ARCHIVER_JOBS".
	Stream string `toml:"stream"`
	// SubjectPrefix prefixes the job subjects. Default "archiver".
	SubjectPrefix string `toml:"subject_prefix"`

	// Authentication: at most one of user+password, token,
	// nkey_seed_file, creds_file, or credentials in the URL.
	User         string `toml:"user,omitempty"`
	Password     string `toml:"password,omitempty"`
	Token        string `toml:"token,omitempty"`
	NkeySeedFile string `toml:"nkey_seed_file,omitempty"`
	CredsFile    string `toml:"creds_file,omitempty"`

	// TLSCA is a PEM file of CAs to trust for the server; TLSCert and
	// TLSKey, set together, are a client certificate.
	TLSCA   string `toml:"tls_ca,omitempty"`
	TLSCert string `toml:"tls_cert,omitempty"`
	TLSKey  string `toml:"tls_key,omitempty"`

	// AllowPrivateTargets lets jobs name relays on loopback, private and
	// link-local addresses. Default false: a job queue must not turn the
	// archiver into a probe of its own network.
	AllowPrivateTargets bool `toml:"allow_private_targets"`
	// MaxConcurrentJobs is how many queued jobs run at once. Default 2.
	MaxConcurrentJobs int `toml:"max_concurrent_jobs"`
}

// Overrides are the command-line flags of `archiver run` that override the
// file. Zero fields leave the file's value.
type Overrides struct {
	DataDir  string   // --data
	Listen   string   // --listen
	LogLevel string   // --log-level
	Relays   []string // --relay, repeatable: appended to the file's relays, with DefaultRelay's settings
	NATSURL  string   // --nats: sets nats.url, adding a default [nats] section if the file has none
}

// Apply sets the overridden values. It does not validate: Load does,
// after applying.
func (c *Config) Apply(o Overrides) {
	if o.DataDir != "" {
		c.DataDir = o.DataDir
	}
	if o.Listen != "" {
		c.Listen = o.Listen
	}
	if o.LogLevel != "" {
		c.LogLevel = o.LogLevel
	}
	for _, u := range o.Relays {
		r := DefaultRelay()
		r.URL = u
		c.Relays = append(c.Relays, r)
	}
	if o.NATSURL != "" {
		if c.NATS == nil {
			n := DefaultNATS()
			c.NATS = &n
		}
		c.NATS.URL = o.NATSURL
	}
}

// Load reads the file at path, applies the flags o over it, and validates
// the result. An empty path means no file: the defaults and the flags
// alone, so that `archiver run --data DIR --relay URL` needs no file.
// Validation runs once, after the flags, so a flag can supply what the
// file lacks (a relay) and every error is reported once.
func Load(path string, o Overrides) (*Config, error) {
	c := Defaults()
	var unknown []error
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if unknown, err = c.decode(data); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	c.Apply(o)
	if err := c.finish(unknown); err != nil {
		src := path
		if src == "" {
			src = "command line"
		}
		return nil, fmt.Errorf("%s: invalid configuration:\n%w", src, err)
	}
	return &c, nil
}

// Parse decodes a file's contents over the defaults and validates them.
func Parse(data []byte) (*Config, error) {
	c := Defaults()
	unknown, err := c.decode(data)
	if err != nil {
		return nil, err
	}
	if err := c.finish(unknown); err != nil {
		return nil, err
	}
	return &c, nil
}

// ErrUnknownKey is the error of a key this package does not know (a typo,
// or a key of a newer version), wrapped in a *FieldError naming it.
var ErrUnknownKey = errors.New("unknown key")

// decode decodes data over c. A TOML syntax or type error is returned as
// err; keys that are not ours come back as FieldErrors, to be reported
// with the validation problems.
func (c *Config) decode(data []byte) (unknown []error, err error) {
	// Preset [nats] so that its defaults survive decoding, and drop it
	// again if the file has no such section.
	if c.NATS == nil {
		n := DefaultNATS()
		c.NATS = &n
	}
	md, err := toml.Decode(string(data), c)
	if err != nil {
		return nil, err
	}
	if !md.IsDefined("nats") {
		c.NATS = nil
	}

	// The decoder makes each [[relay]] from a zero Relay, and MetaData
	// cannot tell which element of an array of tables set a key. So read
	// the relays once more as plain tables: which keys each one set, to
	// default the others and to name unknown keys by index.
	var raw struct {
		Relay []map[string]any `toml:"relay"`
	}
	if _, err := toml.Decode(string(data), &raw); err != nil {
		return nil, err
	}
	if len(raw.Relay) == len(c.Relays) { // else a relay table's name differs in case: reported below
		def := DefaultRelay()
		for i, set := range raw.Relay {
			r := &c.Relays[i]
			if _, ok := set["live"]; !ok {
				r.Live = def.Live
			}
			if _, ok := set["catchup_interval"]; !ok {
				r.CatchupInterval = def.CatchupInterval
			}
			if _, ok := set["tail_overlap"]; !ok {
				r.TailOverlap = def.TailOverlap
			}
		}
	}

	// md.Undecoded is not enough: the toml package falls back to matching
	// struct fields regardless of case, so "Data_Dir" would decode. A key
	// is known only if it is spelled as a toml tag spells it.
	seen := map[string]bool{}
	bad := map[string]bool{} // unknown keys as written, to skip their children
outer:
	for _, k := range md.Keys() {
		if knownKeys[k.String()] {
			continue
		}
		for j := 1; j < len(k); j++ {
			if bad[k[:j].String()] {
				continue outer
			}
		}
		bad[k.String()] = true
		for _, name := range keyNames(k, raw.Relay) {
			if !seen[name] {
				seen[name] = true
				unknown = append(unknown, &FieldError{Key: name, Err: ErrUnknownKey})
			}
		}
	}
	return unknown, nil
}

// knownKeys holds every key path of the file ("limits", "relay.url"), from
// the toml tags of Config.
var knownKeys = func() map[string]bool {
	known := map[string]bool{}
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			known[prefix+name] = true
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				walk(prefix+name+".", ft)
			}
		}
	}
	walk("", reflect.TypeFor[Config]())
	return known
}()

// keyNames names an unknown key as Validate names keys: a key inside
// [[relay]] once per relay that has it, "relay[1].bogus".
func keyNames(k toml.Key, relays []map[string]any) []string {
	if len(k) < 2 || k[0] != "relay" {
		return []string{k.String()}
	}
	rest := toml.Key(k[1:]).String()
	var names []string
	for i, set := range relays {
		if _, ok := set[k[1]]; ok {
			names = append(names, fmt.Sprintf("relay[%d].%s", i, rest))
		}
	}
	if names == nil {
		return []string{k.String()}
	}
	return names
}

// finish validates c, reporting the unknown keys found by decode with the
// other problems, and normalizes the relay URLs of a valid c.
func (c *Config) finish(unknown []error) error {
	if err := errors.Join(slices.Concat(unknown, c.problems())...); err != nil {
		return err
	}
	for i := range c.Relays {
		c.Relays[i].URL, _ = normalizeRelayURL(c.Relays[i].URL)
	}
	return nil
}

// FieldError is one invalid value, or an unknown key.
type FieldError struct {
	// Key is the value's path in the file: "listen",
	// "limits.page_timeout", "relay[2].url", "relay[0].kinds[3]".
	Key string
	Err error
}

func (e *FieldError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }
