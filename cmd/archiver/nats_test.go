package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nostr-archiver/archiver/testrelay"
)

// A job submitted over NATS is crawled by a daemon, `submit --wait`
// returns when it drained, a second submission of the same id does not run
// again, `jobs` reports it, and the daemon's archive holds the valid set.
func TestSubmitToDaemonOverNATS(t *testing.T) {
	t.Parallel()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })

	f := fixture(t, testrelay.FixtureOptions{Seed: 31, Events: 1200, BadSigs: 3})
	r := relay(t, testrelay.Options{}, f)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	conf := filepath.Join(dir, "archiver.toml")
	// Loopback relays are private targets: this node must allow them.
	cfg := fmt.Sprintf("data_dir = %q\n[nats]\nurl = %q\nallow_private_targets = true\n", data, ns.ClientURL())
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "--config", conf)

	submit := func(args ...string) (string, error) {
		out, err := archiver(append([]string{"submit", "--nats", ns.ClientURL(), "--id", "nats-e2e", "--wait", "--timeout", "2m"}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := submit(r.URL())
	if err != nil {
		t.Fatalf("submit --wait: %v\n%s\ndaemon:\n%s", err, out, tail(d.stderr.String()))
	}
	out, err = submit(r.URL())
	if err != nil || !strings.Contains(out, "already submitted") {
		t.Fatalf("second submit: %v\n%s", err, out)
	}
	out2, err := archiver("jobs", "--nats", ns.ClientURL(), "nats-e2e").CombinedOutput()
	if err != nil || !strings.Contains(string(out2), `"nats-e2e"`) {
		t.Fatalf("jobs: %v\n%s", err, out2)
	}
	d.waitStatus("verification", allVerified(len(f.Valid)))
	d.stop(syscall.SIGTERM)
	assertExport(t, data, f)

	// An invalid job is refused before it is queued.
	if out, err := archiver("submit", "--nats", ns.ClientURL(), "--id", "bad/id", r.URL()).CombinedOutput(); err == nil {
		t.Fatalf("an invalid job id was accepted:\n%s", out)
	}
}
