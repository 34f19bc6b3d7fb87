package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Duration is a time.Duration written in the file as a Go duration string
// ("15s", "1h30m"). A bare integer is rejected: TOML would otherwise read
// `stop_timeout = 60` as 60 nanoseconds.
type Duration time.Duration

// UnmarshalTOML implements toml.Unmarshaler.
func (d *Duration) UnmarshalTOML(v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("want a duration string such as \"15s\", got %T %v", v, v)
	}
	x, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(x)
	return nil
}

// MarshalText writes the duration string, so that an encoded Config
// decodes back to itself.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// String is time.Duration's form without zero minutes and seconds: "1h",
// "10m", "1h30m", "15s".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
		if t, ok := strings.CutSuffix(s, "h0m"); ok {
			s = t + "h"
		}
	}
	return s
}

// ByteSize is a number of bytes, written as an integer (8388608) or as a
// string with a unit ("8MiB", "1 GiB", "500MB"). Units are B, KiB, MiB,
// GiB, TiB (powers of 1024) and KB, MB, GB, TB (powers of 1000), in any
// letter case.
type ByteSize uint64

// Units of ByteSize.
const (
	KiB ByteSize = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
)

var sizeUnits = map[string]ByteSize{
	"": 1, "b": 1,
	"kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

// UnmarshalTOML implements toml.Unmarshaler.
func (b *ByteSize) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		if v < 0 {
			return fmt.Errorf("size %d is negative", v)
		}
		*b = ByteSize(v)
		return nil
	case string:
		x, err := ParseByteSize(v)
		if err != nil {
			return err
		}
		*b = x
		return nil
	}
	return fmt.Errorf("want a size such as 8388608 or \"8MiB\", got %T %v", v, v)
}

// ParseByteSize parses "8MiB", "1 GiB", "500MB" or "65536".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(t)
	}
	n, err := strconv.ParseUint(t[:i], 10, 64)
	unit, ok := sizeUnits[strings.ToLower(strings.TrimLeftFunc(t[i:], unicode.IsSpace))]
	if err != nil || !ok {
		return 0, fmt.Errorf("size %q: want an integer with an optional unit B, KiB, MiB, GiB, TiB, KB, MB, GB or TB", s)
	}
	if n > math.MaxUint64/uint64(unit) {
		return 0, fmt.Errorf("size %q overflows 64 bits", s)
	}
	return ByteSize(n) * unit, nil
}

// Set implements flag.Value, so that a command-line flag takes the same
// sizes as the configuration file.
func (b *ByteSize) Set(s string) error {
	x, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = x
	return nil
}

// String writes the size in the largest binary unit that divides it
// exactly: "8MiB", "64KiB", "1000B".
func (b ByteSize) String() string {
	for _, u := range [...]struct {
		n    ByteSize
		name string
	}{{TiB, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}} {
		if b >= u.n && b%u.n == 0 {
			return strconv.FormatUint(uint64(b/u.n), 10) + u.name
		}
	}
	return strconv.FormatUint(uint64(b), 10) + "B"
}

// Timestamp is a point in time as unix seconds; 0 means unset. The file
// may write it as an integer (1700000000), an RFC 3339 string or TOML
// offset date-time (2024-01-01T00:00:00Z), or a date (2024-01-01, as a
// string or a TOML local date), which means midnight UTC. A local
// date-time without an offset is rejected: the archive must not depend on
// the time zone of the machine that reads the file. Durations ("30d", as
// `archiver crawl --since` accepts) are rejected too: in a daemon's file
// they would slide on every restart.
type Timestamp int64

// UnmarshalTOML implements toml.Unmarshaler.
func (ts *Timestamp) UnmarshalTOML(v any) error {
	var t time.Time
	switch v := v.(type) {
	case int64:
		if v < 0 {
			return fmt.Errorf("timestamp %d is negative", v)
		}
		*ts = Timestamp(v)
		return nil
	case string:
		var err error
		if t, err = time.Parse(time.RFC3339, v); err != nil {
			if t, err = time.Parse(time.DateOnly, v); err != nil {
				return fmt.Errorf("timestamp %q: want unix seconds, RFC 3339 or YYYY-MM-DD", v)
			}
		}
	case time.Time:
		// The toml package marks values without an offset with these
		// zone names.
		switch v.Location().String() {
		case "date-local":
			t = time.Date(v.Year(), v.Month(), v.Day(), 0, 0, 0, 0, time.UTC)
		case "datetime-local", "time-local":
			return fmt.Errorf("timestamp %s has no UTC offset: write it as RFC 3339 with Z or +hh:mm", v.Format("2006-01-02T15:04:05"))
		default:
			t = v
		}
	default:
		return fmt.Errorf("want unix seconds or an RFC 3339 time, got %T %v", v, v)
	}
	if t.Unix() < 0 {
		return fmt.Errorf("timestamp %s is before 1970", t.Format(time.RFC3339))
	}
	*ts = Timestamp(t.Unix())
	return nil
}
