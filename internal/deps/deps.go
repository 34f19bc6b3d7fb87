//go:build tools

// Package deps pins the module versions chosen for the project until code imports them.
package deps

import (
	_ "github.com/BurntSushi/toml"
	_ "github.com/btcsuite/btcd/btcec/v2/schnorr"
	_ "github.com/cockroachdb/pebble/v2"
	_ "github.com/decred/dcrd/dcrec/secp256k1/v4"
	_ "github.com/lxzan/gws"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "go.uber.org/goleak"
	_ "go.uber.org/zap"
	_ "golang.org/x/sync/errgroup"
)
