package config

import (
	"time"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/serve"
)

// The defaults of every key, in one place. A key absent from the file
// keeps the value given here; configs/README.md tables them (a test
// checks that the table agrees). The crawl's limits come from
// crawl.DefaultOptions, so that the daemon and `archiver crawl` agree.

// Defaults returns the configuration of an empty file: no relays and no
// [nats] section (so it does not validate until a relay is added).
func Defaults() Config {
	cd := crawl.DefaultOptions()
	return Config{
		DataDir:  "/var/lib/archiver",
		Listen:   "127.0.0.1:9477",
		LogLevel: "info",
		Limits: Limits{
			MaxConnections:         cd.MaxConns,
			MaxConnectionsPerRelay: cd.MaxConnsPerRelay,
			MaxInflightPerConn:     cd.MaxInFlightPerConn,
			VerifyWorkers:          0,
			MaxFrameBytes:          ByteSize(cd.MaxFrame),
			PageTimeout:            Duration(cd.PageTimeout),
			MinFreeDiskBytes:       1 * GiB,
			StopTimeout:            Duration(60 * time.Second),
			MaxDials:               64,
			DialsPerSecond:         50,
			BackoffMin:             Duration(time.Minute),
			BackoffMax:             Duration(6 * time.Hour),
			MetricsRelays:          50,
		},
		Discover: Discover{MaxRelays: 10000},
	}
}

// DefaultRelay returns the settings of a [[relay]] entry that sets only
// its url (and of each --relay flag).
func DefaultRelay() Relay {
	return Relay{
		Live:            true,
		CatchupInterval: Duration(time.Hour),
		RecheckInterval: Duration(24 * time.Hour),
		TailOverlap:     Duration(10 * time.Minute),
	}
}

// DefaultNATS returns the settings of a [nats] section that sets only its
// url (and of the --nats flag).
func DefaultNATS() NATS {
	return NATS{
		Stream:            "ARCHIVER_JOBS",
		SubjectPrefix:     "archiver",
		MaxConcurrentJobs: 2,
	}
}

// DefaultServe returns the settings of a [serve] section that sets only
// its listen address (and of the --serve flag): serve's own defaults.
func DefaultServe() Serve {
	so := serve.DefaultOptions()
	return Serve{
		MaxLimit:         so.MaxLimit,
		MaxSubscriptions: so.MaxSubs,
		MaxMessageBytes:  ByteSize(so.MaxMessageLength),
		MaxCount:         so.MaxCount,
		MaxSyncEvents:    so.MaxSyncEvents,
	}
}
