package daemon

import (
	"fmt"
	"net"
	"reflect"

	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/serve"
	"go.uber.org/zap"
)

// The [serve] section: the daemon answers Nostr clients from the store it
// writes (one process owns a store). Only verified events are served: the
// indexes serve reads are written with the valid verdicts, so an event
// still pending verification is not found.

// bindServe checks that the archive can be served and binds [serve]'s
// address, so that New reports either problem; Run starts the relay.
func (d *Daemon) bindServe() error {
	sc := d.cfg.Serve
	if sc == nil {
		return nil
	}
	ready, err := d.store.IndexesReady()
	if err != nil {
		return fmt.Errorf("daemon: [serve]: %w", err)
	}
	if !ready {
		return fmt.Errorf("daemon: [serve]: %s: %w: run `archiver reprocess --index --data %s` once, then start the daemon",
			d.cfg.DataDir, rawstore.ErrNotIndexed, d.cfg.DataDir)
	}
	if d.serveLn, err = net.Listen("tcp", sc.Listen); err != nil {
		return fmt.Errorf("daemon: [serve]: listen on %s: %w", sc.Listen, err)
	}
	return nil
}

// startServe starts the relay on the bound address; nil without [serve].
func (d *Daemon) startServe() *serve.Server {
	if d.serveLn == nil {
		return nil
	}
	o := d.cfg.Serve.Options()
	o.Listener = d.serveLn
	o.ErrorLog = func(err error) { d.log.Info("serve", zap.Error(err)) }
	srv, err := serve.New(d.store, o)
	if err != nil { // cannot happen with a listener given; the daemon archives on
		d.log.Error("serve did not start", zap.Error(err))
		return nil
	}
	d.log.Info("serving the archive read-only", zap.String("url", srv.URL()))
	return srv
}

// stopServe stops the relay; the store must still be open.
func (d *Daemon) stopServe(srv *serve.Server) {
	if srv == nil {
		return
	}
	if err := srv.Close(); err != nil {
		d.log.Error("stopping serve", zap.Error(err))
	}
}

// ServeAddr is the address the relay of [serve] listens on; "" without.
func (d *Daemon) ServeAddr() string {
	if d.serveLn == nil {
		return ""
	}
	return d.serveLn.Addr().String()
}

// warnServeReload says that a changed [serve] waits for a restart.
func (d *Daemon) warnServeReload(cfg *config.Config) {
	if !reflect.DeepEqual(cfg.Serve, d.cfg.Serve) {
		d.log.Warn("reload: [serve] takes effect on restart only")
	}
}
