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
	"maps"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/serve"
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
	// AuthKeyFile is the NIP-42 key (hex or nsec; a file only its owner
	// may read) for every relay that asks for AUTH, including the relays
	// of NATS jobs. Unset: $ARCHIVER_AUTH_KEY, else the systemd credential
	// nostr-auth-key, else no key. See AuthKeys.
	AuthKeyFile string `toml:"auth_key_file,omitempty"`

	Limits Limits `toml:"limits"`

	// Relays are the [[relay]] entries, archived in this order. At least
	// one relay or a [nats] section is required.
	Relays []Relay `toml:"relay"`

	// NATS is the [nats] section, nil when the file has none: the daemon
	// then archives only its own relays.
	NATS *NATS `toml:"nats"`

	// Serve is the [serve] section, nil when the file has none: the
	// daemon then does not answer Nostr clients.
	Serve *Serve `toml:"serve"`
	// Discover is the [discover] section (off by default).
	Discover Discover `toml:"discover"`
}

// Limits bound what the daemon may use; they are ceilings, the adaptive
// controller decides what it actually uses below them.
type Limits struct {
	// MaxConnections caps WebSocket connections over all relays. Default 64.
	MaxConnections int `toml:"max_connections"`
	// MaxConnectionsPerRelay caps connections to one relay. Default 4.
	MaxConnectionsPerRelay int `toml:"max_connections_per_relay"`
	// MaxInflightPerConn caps REQs in flight on one connection. Default 8.
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
	// MaxDials caps the connection attempts in flight at once to relays
	// not known to be up, apart from crawling's connections, so that dead
	// relays cannot hold up live ones. Default 64.
	MaxDials int `toml:"max_dials"`
	// DialsPerSecond caps how many such attempts start per second.
	// Default 50.
	DialsPerSecond int `toml:"dials_per_second"`
	// BackoffMin is the pause after a relay's first failure (unreachable,
	// refusing, a failed pass); each further failure doubles it, with
	// ±20% jitter, up to BackoffMax. Defaults "1m" and "6h".
	BackoffMin Duration `toml:"backoff_min"`
	BackoffMax Duration `toml:"backoff_max"`
	// MetricsRelays is how many [[relay]] entries, the first ones, get
	// their own per-relay crawl series in /metrics; the others and the
	// discovered relays share relay="other", so that the series stay
	// bounded over thousands of relays. Default 50.
	MetricsRelays int `toml:"metrics_relays"`
}

// Discover is the [discover] section: crawling the relays that archived
// events name (NIP-65 relay lists, contact lists, NIP-66, relay hints).
type Discover struct {
	// Enabled turns discovery on. Default false.
	Enabled bool `toml:"enabled"`
	// Allow, when set, admits only relays whose host is one of these
	// names or under one of them ("example.com" admits
	// relay.example.com).
	Allow []string `toml:"allow,omitempty"`
	// Deny refuses relays whose host is one of these names or under one.
	Deny []string `toml:"deny,omitempty"`
	// AllowPrivate lets discovered relays be on loopback, private or
	// link-local addresses (tests, a lab network). Default false: what
	// events say must not make the archiver probe its own network.
	AllowPrivate bool `toml:"allow_private"`
	// MaxRelays bounds the relays discovery adds. Default 10000.
	MaxRelays int `toml:"max_relays"`
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
	// RecheckInterval is how often a live relay's earlier ranges are
	// checked against its NIP-77 or COUNT again (the first pass of each
	// process does it too), and paged again where the relay now holds
	// events the archive lacks: events published with an old created_at
	// while the tail was not connected. 0 turns it off. Default "24h".
	RecheckInterval Duration `toml:"recheck_interval"`
	// TailOverlap is how far before the newest archived created_at the
	// live subscription and each catch-up start. Default "10m".
	TailOverlap Duration `toml:"tail_overlap"`
	// AuthKeyFile is this relay's own NIP-42 key file, over the top-level
	// auth_key_file.
	AuthKeyFile string `toml:"auth_key_file,omitempty"`
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

// Serve is the optional [serve] section: the daemon also serves the
// archive it writes as a read-only relay (package serve: REQ, COUNT,
// NIP-77, NIP-11), verified events only. One process owns a store, so
// this is how an archive being written is served.
type Serve struct {
	// Listen is the host:port of the relay (WebSocket and NIP-11).
	// Required in a [serve] section; not the same as the top-level listen.
	Listen string `toml:"listen"`
	// MaxLimit is the most events one filter of a REQ returns (NIP-11
	// max_limit). Default 5000.
	MaxLimit int `toml:"max_limit"`
	// MaxSubscriptions caps open subscriptions per connection. Default 20.
	MaxSubscriptions int `toml:"max_subscriptions"`
	// MaxMessageBytes is the largest client message. Default 128KiB;
	// 4KiB to 16MiB.
	MaxMessageBytes ByteSize `toml:"max_message_bytes"`
	// MaxCount is where a NIP-45 COUNT stops and answers approximate.
	// Default 1000000.
	MaxCount int `toml:"max_count"`
	// MaxSyncEvents is the largest NIP-77 set; a larger one is refused
	// "blocked: too many records" (the client splits it). Default 1000000.
	MaxSyncEvents int `toml:"max_sync_events"`
}

// Options are the serve.Options of s.
func (s *Serve) Options() serve.Options {
	o := serve.DefaultOptions()
	o.Addr = s.Listen
	o.MaxLimit, o.MaxSubs, o.MaxCount, o.MaxSyncEvents = s.MaxLimit, s.MaxSubscriptions, s.MaxCount, s.MaxSyncEvents
	o.MaxMessageLength = int(s.MaxMessageBytes)
	return o
}

// Overrides are the command-line flags of `archiver run` that override the
// file. Zero fields leave the file's value.
type Overrides struct {
	DataDir  string   // --data
	Listen   string   // --listen
	LogLevel string   // --log-level
	Relays   []string // --relay, repeatable: appended to the file's relays, with DefaultRelay's settings
	NATSURL  string   // --nats: sets nats.url, adding a default [nats] section if the file has none
	// ServeListen is --serve: sets serve.listen, adding a default [serve]
	// section if the file has none.
	ServeListen string
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
	if o.ServeListen != "" {
		if c.Serve == nil {
			sv := DefaultServe()
			c.Serve = &sv
		}
		c.Serve.Listen = o.ServeListen
	}
}

// Load reads the file at path, applies the flags o over it, and validates
// the result. An empty path means no file: the defaults and the flags
// alone, so that `archiver run --data DIR --relay URL` needs no file.
// Validation runs once, after the flags, so a flag can supply what the
// file lacks (a relay) and every error is reported once.
func Load(path string, o Overrides) (*Config, error) {
	c := Defaults()
	var bad []error
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if bad, err = c.decode(data); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	c.Apply(o)
	if err := c.finish(bad); err != nil {
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
	bad, err := c.decode(data)
	if err != nil {
		return nil, err
	}
	if err := c.finish(bad); err != nil {
		return nil, err
	}
	return &c, nil
}

// ErrUnknownKey is the error of a key this package does not know (a typo,
// or a key of a newer version), wrapped in a *FieldError naming it.
var ErrUnknownKey = errors.New("unknown key")

// decode decodes data over c. Only a TOML syntax error is returned as err
// (nothing after it can be read). The file is first read loosely, every
// value kept undecoded, and then each key is decoded on its own, so that
// a value of the wrong type and a key that is not ours come back as
// FieldErrors (all of them, not the first), to be reported with the
// validation problems. A key not set keeps its default; a key that fails
// to decode keeps it too.
func (c *Config) decode(data []byte) (bad []error, err error) {
	var top map[string]toml.Primitive
	md, err := toml.Decode(string(data), &top)
	if err != nil {
		return nil, err
	}
	d := decoder{md: md}
	d.table("", top, reflect.ValueOf(c).Elem())
	return d.errs, nil
}

// decoder decodes one file's values key by key, collecting FieldErrors.
type decoder struct {
	md   toml.MetaData
	errs []error
}

func (d *decoder) fail(key string, err error) {
	d.errs = append(d.errs, &FieldError{Key: key, Err: err})
}

// table decodes the keys of one TOML table into the struct v. A key is
// known only if it is spelled exactly as a toml tag spells it (the toml
// package would match "Data_Dir" to data_dir regardless of case).
func (d *decoder) table(prefix string, m map[string]toml.Primitive, v reflect.Value) {
	fields := map[string]reflect.Value{}
	for i := 0; i < v.NumField(); i++ {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("toml"), ",")
		fields[name] = v.Field(i)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		f, ok := fields[k]
		if !ok {
			d.fail(prefix+k, ErrUnknownKey)
			continue
		}
		d.value(prefix+k, m[k], f)
	}
}

// value decodes p into the field f: a section ([limits], [nats]) and each
// [[relay]] table start from their defaults and are decoded key by key.
func (d *decoder) value(key string, p toml.Primitive, f reflect.Value) {
	switch {
	case f.Type() == reflect.TypeFor[Limits](), f.Type() == reflect.TypeFor[Discover]():
		d.section(key, p, f)
	case f.Type() == reflect.TypeFor[*NATS]():
		optional(d, key, p, f, DefaultNATS())
	case f.Type() == reflect.TypeFor[*Serve]():
		optional(d, key, p, f, DefaultServe())
	case f.Type() == reflect.TypeFor[[]Relay]():
		var tables []map[string]toml.Primitive
		if err := d.md.PrimitiveDecode(p, &tables); err != nil {
			d.fail(key, errors.New("want [[relay]] tables"))
			return
		}
		relays := make([]Relay, len(tables))
		for i, t := range tables {
			relays[i] = DefaultRelay()
			d.table(fmt.Sprintf("%s[%d].", key, i), t, reflect.ValueOf(&relays[i]).Elem())
		}
		f.Set(reflect.ValueOf(relays))
	default:
		// Into a fresh value: a failed decode leaves the default alone.
		x := reflect.New(f.Type())
		if err := d.md.PrimitiveDecode(p, x.Interface()); err != nil {
			d.fail(key, decodeError(err))
			return
		}
		f.Set(x.Elem())
	}
}

// optional decodes an optional section into f (a *T), over def.
func optional[T any](d *decoder, key string, p toml.Primitive, f reflect.Value, def T) {
	if d.section(key, p, reflect.ValueOf(&def).Elem()) {
		f.Set(reflect.ValueOf(&def))
	}
}

// section decodes a [table] into the struct v and reports whether p was
// a table.
func (d *decoder) section(key string, p toml.Primitive, v reflect.Value) bool {
	// The toml package decodes a non-table into a map without an error:
	// look first.
	var loose any
	_ = d.md.PrimitiveDecode(p, &loose)
	var m map[string]toml.Primitive
	if _, ok := loose.(map[string]any); !ok || d.md.PrimitiveDecode(p, &m) != nil {
		d.fail(key, fmt.Errorf("want a [%s] table", key))
		return false
	}
	d.table(key+".", m, v)
	return true
}

// decodeError is the toml package's error in one sentence, without its
// "toml: " prefix and the key it would repeat.
func decodeError(err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		err = errors.New(pe.Message)
	}
	msg := strings.TrimPrefix(err.Error(), "toml: ")
	if _, after, ok := strings.Cut(msg, "): "); ok && strings.HasPrefix(msg, "incorrect type") {
		msg = after
	}
	return errors.New(msg)
}

// finish validates c, reporting the FieldErrors found by decode with the
// other problems (a key that did not decode is not judged again on the
// default it kept), and normalizes the relay URLs of a valid c.
func (c *Config) finish(bad []error) error {
	failed := map[string]bool{}
	for _, err := range bad {
		var fe *FieldError
		if errors.As(err, &fe) {
			failed[fe.Key] = true
		}
	}
	all := bad
	for _, err := range c.problems() {
		var fe *FieldError
		if !errors.As(err, &fe) || !failed[fe.Key] {
			all = append(all, err)
		}
	}
	if err := errors.Join(all...); err != nil {
		return err
	}
	for i := range c.Relays {
		c.Relays[i].URL, _ = crawl.NormalizeURL(c.Relays[i].URL)
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
