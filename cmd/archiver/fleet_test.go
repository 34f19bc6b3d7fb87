package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/nostr-archiver/archiver/daemon"
	"github.com/nostr-archiver/archiver/testrelay"
)

// The frontier and the backoff state survive kill -9: a daemon that
// discovered a live relay and two dead ones from a seed's relay list is
// killed once their records are written; restarted with the seed gone
// (so nothing can be discovered again), it archives the discovered live
// relay and does not dial the dead ones.
func TestDaemonKill9KeepsFrontierAndBackoff(t *testing.T) {
	t.Parallel()
	sk, err := btcec.NewPrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	var dead []*testrelay.DeadPort
	for range 2 {
		d, err := testrelay.NewDeadPort("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		dead = append(dead, d)
	}
	found, err := testrelay.New(testrelay.Options{SupportCount: true}) // COUNT proves its one event complete
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { found.Close() })
	note, err := testrelay.RelayList(sk, 1_700_000_001) // an event for the found relay to serve
	if err != nil {
		t.Fatal(err)
	}
	found.Add(note)
	seed, err := testrelay.New(testrelay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := testrelay.RelayList(sk, 1_700_000_000, found.URL(), dead[0].URL(), dead[1].URL())
	if err != nil {
		t.Fatal(err)
	}
	seed.Add(list)

	data := t.TempDir()
	conf := filepath.Join(t.TempDir(), "archiver.toml")
	err = os.WriteFile(conf, []byte(fmt.Sprintf(`data_dir = %q
[limits]
min_free_disk_bytes = 0
backoff_min = "1h"
[discover]
enabled = true
allow_private = true
[[relay]]
url = %q
`, data, seed.URL())), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	relayState := func(st *daemon.Status, url string) *daemon.RelayState {
		for i := range st.Relays {
			if st.Relays[i].Relay.URL == url {
				return &st.Relays[i]
			}
		}
		return nil
	}
	backedOff := func(st *daemon.Status) bool {
		for _, d := range dead {
			if r := relayState(st, d.URL()); r == nil || r.State != "backoff" {
				return false
			}
		}
		return true
	}
	d := startDaemon(t, "--config", conf)
	d.waitStatus("the dead relays backing off, the found relay archived, all saved", func(st *daemon.Status) bool {
		r := relayState(st, found.URL())
		return backedOff(st) && r != nil && r.BackfillComplete && st.UnsavedNotes == 0
	})
	d.stop(syscall.SIGKILL)
	seed.Close()
	for _, dp := range dead {
		if dp.Dials() != 1 {
			t.Fatalf("%s dialed %d times before the kill", dp.URL(), dp.Dials())
		}
	}

	d = startDaemon(t, "--config", conf)
	d.waitStatus("the found relay archived again, the dead still backing off", func(st *daemon.Status) bool {
		r := relayState(st, found.URL())
		return backedOff(st) && r != nil && r.Discovered != nil && r.Passes == 1 && r.BackfillComplete
	})
	d.stop(syscall.SIGTERM)
	for _, dp := range dead {
		if dp.Dials() != 1 {
			t.Errorf("%s dialed %d times across kill -9 and restart, want 1", dp.URL(), dp.Dials())
		}
	}

	// archiver relays lists what the daemon kept: the dead as failing,
	// the found relay with the event that named it.
	code, out, stderr, _ := run(t, t.TempDir(), "relays", "--data", data, "--json")
	var listed []knownRelay
	if err := json.Unmarshal([]byte(out), &listed); code != 0 || err != nil {
		t.Fatalf("relays: exit %d, %v\n%s", code, err, stderr)
	}
	byURL := map[string]knownRelay{}
	for _, k := range listed {
		byURL[k.URL] = k
	}
	for _, dp := range dead {
		k := byURL[dp.URL()]
		if k.State != "failing" || k.Daemon == nil || k.Daemon.Schedule == nil || k.Daemon.Schedule.Failures != 1 || k.Daemon.Discovered == nil {
			t.Errorf("relays lists %s as %+v", dp.URL(), k)
		}
	}
	if k := byURL[found.URL()]; k.Daemon == nil || k.Daemon.Discovered == nil || k.Daemon.Discovered.From != list.ID {
		t.Errorf("relays lists %s as %+v, want discovered from %s", found.URL(), k, list.ID)
	}
}
