package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// fieldKeys flattens a joined error into the keys of its FieldErrors and
// fails the test on any other kind of leaf.
func fieldKeys(t *testing.T, err error) []string {
	t.Helper()
	var keys []string
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("error %q is not a *FieldError", err)
			return
		}
		keys = append(keys, fe.Key)
	}
	if err != nil {
		walk(err)
	}
	slices.Sort(keys)
	return keys
}

func TestParseFiles(t *testing.T) {
	for _, tc := range []struct {
		file     string
		wantKeys []string // keys of the FieldErrors; nil: valid
	}{
		{file: "full.toml"},
		{file: "minimal.toml"},
		{file: "nats_only.toml"},
		{file: "bad_values.toml", wantKeys: []string{
			"data_dir",
			"limits.max_connections",
			"limits.max_connections_per_relay",
			"limits.max_frame_bytes",
			"limits.max_inflight_per_conn",
			"limits.page_timeout",
			"limits.stop_timeout",
			"limits.verify_workers",
			"listen",
			"log_level",
			"nats.max_concurrent_jobs",
			"nats.password",
			"nats.stream",
			"nats.subject_prefix",
			"nats.tls_cert",
			"nats.url", "nats.url",
			"relay[0].url",
			"relay[1].url",
			"relay[2].url",
			"relay[3].authors[0]", "relay[3].authors[1]",
			"relay[3].kinds[1]", "relay[3].kinds[2]",
			"relay[3].until",
			"relay[4].catchup_interval",
			"relay[4].recheck_interval",
			"relay[4].tail_overlap",
			"relay[4].until",
		}},
		{file: "unknown_keys.toml", wantKeys: []string{
			"Limits", "Log_Level", "dta_dir", "extra", "limits.max_conections", "nats.passwrd", "relay[1].lve",
		}},
		{file: "duplicate_relays.toml", wantKeys: []string{"relay[2].url"}},
		{file: "nats_auth_conflict.toml", wantKeys: []string{"nats"}},
		{file: "explicit_zero.toml", wantKeys: []string{"relay[0].catchup_interval"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			c, err := Parse(data)
			if got := fieldKeys(t, err); !slices.Equal(got, tc.wantKeys) {
				t.Errorf("error keys\n got %q\nwant %q\nerror:\n%v", got, tc.wantKeys, err)
			}
			if (c == nil) != (tc.wantKeys != nil) {
				t.Errorf("config %v with error %v", c, err)
			}
		})
	}
}

// Messages name the key, quote the value and say what is wanted.
func TestErrorMessages(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"bad_values.toml", `relay[1].url: "ftp://x": scheme "ftp" is not ws or wss`},
		{"bad_values.toml", `relay[2].url: "wss://relay.example.com:99999": port "99999" is not a number from 1 to 65535`},
		{"bad_values.toml", `limits.max_frame_bytes: 1KiB: must be between 64KiB and 64MiB`},
		{"bad_values.toml", `relay[3].kinds[1]: 70000: must be between 0 and 65535`},
		{"unknown_keys.toml", `relay[1].lve: unknown key`},
		{"duplicate_relays.toml", `relay[2].url: "relay.EXAMPLE.com/": same relay as relay[0]`},
		{"nats_auth_conflict.toml", "nats: conflicting authentication: credentials in nats.url, " +
			"nats.user/nats.password, nats.token, nats.nkey_seed_file, nats.creds_file; set at most one"},
	} {
		data, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Parse(data)
		if err == nil || !slices.Contains(strings.Split(err.Error(), "\n"), tc.want) {
			t.Errorf("%s: no line %q in\n%v", tc.file, tc.want, err)
		}
	}
	_, err := Parse([]byte("bogus = 1\n[[relay]]\nurl = \"x\""))
	if !errors.Is(err, ErrUnknownKey) {
		t.Errorf("unknown key error %v is not ErrUnknownKey", err)
	}
}

func TestFull(t *testing.T) {
	data, err := os.ReadFile("testdata/full.toml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		DataDir:     "/srv/archive",
		Listen:      "[::1]:9000",
		LogLevel:    "debug",
		AuthKeyFile: "/etc/archiver/nostr.key",
		Limits: Limits{
			MaxConnections:         128,
			MaxConnectionsPerRelay: 8,
			MaxInflightPerConn:     2,
			VerifyWorkers:          3,
			MaxFrameBytes:          16 * MiB,
			PageTimeout:            Duration(30 * time.Second),
			MinFreeDiskBytes:       5 * GiB,
			StopTimeout:            Duration(2 * time.Minute),
			MaxDials:               500,
			DialsPerSecond:         200,
			BackoffMin:             Duration(30 * time.Second),
			BackoffMax:             Duration(12 * time.Hour),
			MetricsRelays:          5,
		},
		Discover: Discover{Enabled: true, Allow: []string{"example.com"}, Deny: []string{"spam.example.com"}, AllowPrivate: true, MaxRelays: 500},
		Relays: []Relay{{
			URL:             "wss://relay.example.com",
			Since:           1700000000,
			Until:           1717200000,
			Kinds:           []int{0, 1, 3, 30023},
			Authors:         []string{"3bf0c63fcb93463407af97a5e5ee64fa883d107ef9e558472c4eb9aaaefa459d"},
			Live:            false,
			CatchupInterval: Duration(30 * time.Minute),
			RecheckInterval: Duration(24 * time.Hour),
			TailOverlap:     Duration(5 * time.Minute),
			AuthKeyFile:     "/etc/archiver/example.key",
		}, {
			URL:             "wss://nos.lol",
			Since:           1672531200, // a TOML local date is midnight UTC
			Live:            true,
			CatchupInterval: Duration(2 * time.Hour),
			RecheckInterval: Duration(24 * time.Hour),
			TailOverlap:     Duration(10 * time.Minute),
		}, {
			URL:             "ws://127.0.0.1:7777/path",
			Since:           1704103200, // 12:00+02:00
			Live:            true,
			CatchupInterval: Duration(time.Hour),
			RecheckInterval: Duration(24 * time.Hour),
			TailOverlap:     0, // set explicitly: not replaced by the default
		}},
		NATS: &NATS{
			URL:                 "tls://nats-1.internal:4222, tls://nats-2.internal:4222",
			Stream:              "JOBS",
			SubjectPrefix:       "archiver.eu",
			CredsFile:           "/etc/archiver/nats.creds",
			TLSCA:               "/etc/archiver/ca.pem",
			TLSCert:             "/etc/archiver/client.pem",
			TLSKey:              "/etc/archiver/client.key",
			AllowPrivateTargets: true,
			MaxConcurrentJobs:   8,
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("full.toml\n got %+v\nwant %+v", got, want)
	}
}

func TestMinimal(t *testing.T) {
	got, err := Parse([]byte("[[relay]]\nurl = \"relay.damus.io\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	r := DefaultRelay()
	r.URL = "wss://relay.damus.io"
	want.Relays = []Relay{r}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("got %+v\nwant %+v", *got, want)
	}
	n, err := Parse([]byte("[nats]\nurl = \"x\""))
	if err != nil {
		t.Fatal(err)
	}
	wantNATS := DefaultNATS()
	wantNATS.URL = "x"
	if !reflect.DeepEqual(*n.NATS, wantNATS) {
		t.Errorf("nats: got %+v, want %+v", *n.NATS, wantNATS)
	}
}

// A value of the wrong type is a FieldError naming its key, in one line.
func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct{ name, toml, want string }{
		{"integer duration", "[limits]\npage_timeout = 15", `limits.page_timeout: want a duration string such as "15s"`},
		{"bad duration", "[limits]\nstop_timeout = \"soon\"", `limits.stop_timeout: time: invalid duration "soon"`},
		{"bad size unit", "[limits]\nmax_frame_bytes = \"8 MB/s\"", `limits.max_frame_bytes: size "8 MB/s"`},
		{"negative size", "[limits]\nmin_free_disk_bytes = -1", `limits.min_free_disk_bytes: size -1 is negative`},
		{"size overflow", "[limits]\nmin_free_disk_bytes = \"99999999999TiB\"", "overflows"},
		{"local datetime", "[[relay]]\nurl = \"x\"\nsince = 2024-01-01T00:00:00", "relay[0].since: timestamp 2024-01-01T00:00:00 has no UTC offset"},
		{"relative time", "[[relay]]\nurl = \"x\"\nsince = \"30d\"", `relay[0].since: timestamp "30d"`},
		{"negative time", "[[relay]]\nurl = \"x\"\nsince = -5", "relay[0].since: timestamp -5 is negative"},
		{"pre-1970 time", "[[relay]]\nurl = \"x\"\nsince = 1969-12-31T00:00:00Z", "before 1970"},
		{"wrong type", "listen = 9477", "listen: "},
		{"int for string list", "[[relay]]\nurl = \"x\"\nauthors = 5", "relay[0].authors: "},
		{"relay as a table", "[relay]\nurl = \"x\"", "relay: want [[relay]] tables"},
		{"limits as a value", "limits = 5", "limits: want a [limits] table"},
		{"syntax", "data_dir = ", "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.toml))
			if err == nil || !slices.ContainsFunc(strings.Split(err.Error(), "\n"), func(l string) bool { return strings.Contains(l, tc.want) }) {
				t.Errorf("error %v: no line with %q", err, tc.want)
			}
		})
	}
}

// Every problem of a file comes out at once: wrong types, unknown keys and
// invalid values together, each once, and a key that failed to decode is
// not judged again on the default it kept.
func TestAllErrorsAtOnce(t *testing.T) {
	_, err := Parse([]byte(`
listen = 9477
log_level = "loud"
bogus = true
[limits]
page_timeout = 15
max_connections = "many"
max_connections_per_relay = 0
[[relay]]
url = 5
[[relay]]
url = "ws://127.0.0.1:99999"
since = "yesterday"
kinds = [1, "x"]
`))
	want := []string{
		"bogus", "limits.max_connections", "limits.max_connections_per_relay", "limits.page_timeout",
		"listen", "log_level", "relay[0].url", "relay[1].kinds", "relay[1].since", "relay[1].url",
	}
	if got := fieldKeys(t, err); !slices.Equal(got, want) {
		t.Errorf("error keys\n got %q\nwant %q\nerror:\n%v", got, want, err)
	}
}

func TestTimestampForms(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want Timestamp
	}{
		{"1700000000", 1700000000},
		{`"2023-11-14T22:13:20Z"`, 1700000000},
		{"2023-11-14T23:13:20+01:00", 1700000000},
		{`"2023-11-14"`, 1699920000},
		{"2023-11-14", 1699920000},
	} {
		var v struct {
			T Timestamp `toml:"t"`
		}
		if _, err := toml.Decode("t = "+tc.v, &v); err != nil || v.T != tc.want {
			t.Errorf("t = %s: got %d, %v; want %d", tc.v, v.T, err, tc.want)
		}
	}
}

func TestByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ByteSize
		str  string
	}{
		{"65536", 64 * KiB, "64KiB"},
		{"8MiB", 8 * MiB, "8MiB"},
		{" 1 gib ", GiB, "1GiB"},
		{"500MB", 500e6, "500000000B"},
		{"1000", 1000, "1000B"},
		{"3TiB", 3 * TiB, "3TiB"},
		{"0B", 0, "0B"},
	} {
		got, err := ParseByteSize(tc.in)
		if err != nil || got != tc.want || got.String() != tc.str {
			t.Errorf("ParseByteSize(%q) = %d (%v), %v; want %d (%s)", tc.in, got, got, err, tc.want, tc.str)
		}
	}
	for _, in := range []string{"", "MiB", "1.5GiB", "-1", "8 MiB/s", "1e6", "18446744073709551616"} {
		if got, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "archiver.toml")
	if err := os.WriteFile(file, []byte(`
data_dir = "/from/file"
listen = "127.0.0.1:1"
[[relay]]
url = "wss://file.example"
`), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("file only", func(t *testing.T) {
		c, err := Load(file, Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		if c.DataDir != "/from/file" || len(c.Relays) != 1 || c.NATS != nil {
			t.Errorf("got %+v", c)
		}
	})
	t.Run("flags override the file", func(t *testing.T) {
		c, err := Load(file, Overrides{
			DataDir:  "/from/flag",
			LogLevel: "warn",
			Relays:   []string{"ws://Flag.example:8080/"},
			NATSURL:  "nats://q:4222",
		})
		if err != nil {
			t.Fatal(err)
		}
		if c.DataDir != "/from/flag" || c.Listen != "127.0.0.1:1" || c.LogLevel != "warn" {
			t.Errorf("top level: %+v", c)
		}
		urls := []string{}
		for _, r := range c.Relays {
			urls = append(urls, r.URL)
		}
		if want := []string{"wss://file.example", "ws://flag.example:8080"}; !slices.Equal(urls, want) {
			t.Errorf("relays %q, want %q", urls, want)
		}
		if !c.Relays[1].Live || c.Relays[1].CatchupInterval != DefaultRelay().CatchupInterval {
			t.Errorf("--relay has no defaults: %+v", c.Relays[1])
		}
		want := DefaultNATS()
		want.URL = "nats://q:4222"
		if c.NATS == nil || *c.NATS != want {
			t.Errorf("--nats: %+v", c.NATS)
		}
	})
	t.Run("no file", func(t *testing.T) {
		c, err := Load("", Overrides{DataDir: "d", Listen: "127.0.0.1:0", Relays: []string{"a.example"}})
		if err != nil {
			t.Fatal(err)
		}
		if c.DataDir != "d" || c.Listen != "127.0.0.1:0" || c.Relays[0].URL != "wss://a.example" {
			t.Errorf("got %+v", c)
		}
	})
	t.Run("no file nothing to do", func(t *testing.T) {
		_, err := Load("", Overrides{})
		if got := fieldKeys(t, errors.Unwrap(err)); !slices.Equal(got, []string{"relay"}) {
			t.Errorf("keys %q, error %v", got, err)
		}
	})
	t.Run("flag duplicates the file", func(t *testing.T) {
		_, err := Load(file, Overrides{Relays: []string{"file.example"}})
		if err == nil || !strings.HasPrefix(err.Error(), file+": invalid configuration:\nrelay[1].url: ") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		if _, err := Load(filepath.Join(dir, "nope.toml"), Overrides{}); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("error %v", err)
		}
	})
}

// An encoded Config decodes back to itself: the types' text forms and the
// relay defaults (explicit false and 0s) survive a round trip.
func TestRoundTrip(t *testing.T) {
	for _, file := range []string{"full.toml", "minimal.toml", "nats_only.toml"} {
		data, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		c, err := Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, c)
	}
}

func roundTrip(t *testing.T, c *Config) {
	t.Helper()
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(c); err != nil {
		t.Fatal(err)
	}
	back, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.Bytes())
	}
	if !reflect.DeepEqual(back, c) {
		t.Errorf("round trip\n got %+v\nwant %+v\n%s", back, c, buf.Bytes())
	}
}

func TestWorkers(t *testing.T) {
	if got := (Limits{VerifyWorkers: 3}).Workers(); got != 3 {
		t.Errorf("Workers() = %d, want 3", got)
	}
	if got := (Limits{}).Workers(); got < 1 {
		t.Errorf("Workers() of 0 = %d, want the CPU count", got)
	}
}

// FuzzParse: Parse never panics, and whatever it accepts survives an
// encode/decode round trip.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.toml")
	files = append(files, "../configs/archiver.toml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		roundTrip(t, c)
	})
}

// [serve] takes serve's defaults, --serve adds it, and its values are
// checked with the rest of the file.
func TestServeSection(t *testing.T) {
	const relay = "\n[[relay]]\nurl = \"r.example\"\n"
	c, err := Parse([]byte("[serve]\nlisten = \"127.0.0.1:7777\"\nmax_limit = 10" + relay))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultServe()
	want.Listen, want.MaxLimit = "127.0.0.1:7777", 10
	if c.Serve == nil || *c.Serve != want {
		t.Fatalf("[serve]: %+v, want %+v", c.Serve, want)
	}
	if o := c.Serve.Options(); o.Addr != "127.0.0.1:7777" || o.MaxLimit != 10 || o.MaxSyncEvents != want.MaxSyncEvents || o.MaxMessageLength != 128<<10 {
		t.Fatalf("serve options %+v", o)
	}
	if c, err := Load("", Overrides{DataDir: "d", Relays: []string{"r.example"}, ServeListen: "127.0.0.1:0"}); err != nil || c.Serve == nil || c.Serve.Listen != "127.0.0.1:0" || c.Serve.MaxLimit != DefaultServe().MaxLimit {
		t.Fatalf("--serve: %+v, %v", c, err)
	}
	if c, _ := Parse([]byte(relay)); c.Serve != nil {
		t.Fatalf("no [serve], but %+v", c.Serve)
	}
	for _, tc := range []struct{ file, want string }{
		{"[serve]\nmax_limit = 5", "serve.listen: must be set in a [serve] section"},
		{"[serve]\nlisten = \"nowhere\"", `serve.listen: "nowhere": must be host:port`},
		{"listen = \"127.0.0.1:9\"\n[serve]\nlisten = \"127.0.0.1:9\"", `serve.listen: "127.0.0.1:9": is also listen (/metrics): give the relay its own address`},
		{"[serve]\nlisten = \":1\"\nmax_sync_events = 0", "serve.max_sync_events: 0: must be at least 1"},
		{"[serve]\nlisten = \":1\"\nmax_message_bytes = \"1KiB\"", "serve.max_message_bytes: 1KiB: must be between 4KiB and 16MiB"},
		{"[serve]\nlisten = \":1\"\nlistn = \":2\"", "serve.listn: unknown key"},
		{"serve = 3", "serve: want a [serve] table"},
	} {
		_, err := Parse([]byte(tc.file + relay))
		if err == nil || !slices.Contains(strings.Split(err.Error(), "\n"), tc.want) {
			t.Errorf("%q: no line %q in\n%v", tc.file, tc.want, err)
		}
	}
}

func TestDiscoverAdmits(t *testing.T) {
	d := Discover{Allow: []string{"example.com", "nos.lol"}, Deny: []string{"spam.example.com"}}
	for host, want := range map[string]bool{
		"example.com":        true,
		"relay.example.com":  true,
		"badexample.com":     false, // not under example.com
		"spam.example.com":   false,
		"a.spam.example.com": false,
		"nos.lol":            true,
		"other.org":          false,
	} {
		if got := d.Admits(host); got != want {
			t.Errorf("Admits(%q) = %v, want %v", host, got, want)
		}
	}
	if !(&Discover{}).Admits("any.org") {
		t.Error("no lists should admit every host")
	}
	_, err := Parse([]byte("[[relay]]\nurl = \"nos.lol\"\n[discover]\nallow = [\"wss://x.org\"]\nmax_relays = 0\n[limits]\nbackoff_min = \"1h\"\nbackoff_max = \"1m\"\n"))
	for _, key := range []string{"discover.allow[0]", "discover.max_relays", "limits.backoff_max"} {
		if err == nil || !strings.Contains(err.Error(), key+":") {
			t.Errorf("want an error naming %s, got %v", key, err)
		}
	}
}
