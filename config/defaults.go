package config

import "time"

// The defaults of every key, in one place. A key absent from the file
// keeps the value given here; configs/README.md tables them (a test
// checks that the table agrees).

// Defaults returns the configuration of an empty file: no relays and no
// [nats] section (so it does not validate until a relay is added).
func Defaults() Config {
	return Config{
		DataDir:  "/var/lib/archiver",
		Listen:   "127.0.0.1:9477",
		LogLevel: "info",
		Limits: Limits{
			MaxConnections:         64,
			MaxConnectionsPerRelay: 4,
			MaxInflightPerConn:     4,
			VerifyWorkers:          0,
			MaxFrameBytes:          8 * MiB,
			PageTimeout:            Duration(15 * time.Second),
			MinFreeDiskBytes:       1 * GiB,
			StopTimeout:            Duration(60 * time.Second),
		},
	}
}

// DefaultRelay returns the settings of a [[relay]] entry that sets only
// its url (and of each --relay flag).
func DefaultRelay() Relay {
	return Relay{
		Live:            true,
		CatchupInterval: Duration(time.Hour),
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
