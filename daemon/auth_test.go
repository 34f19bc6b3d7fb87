package daemon

import (
	"bytes"
	"context"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/testrelay"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// keyFile writes a test key (secret seed repeated) to a file of mode and
// returns its path, the hex secret and the hex pubkey.
func keyFile(t *testing.T, seed byte, mode os.FileMode) (path, secret, pub string) {
	t.Helper()
	b := bytes.Repeat([]byte{seed}, 32)
	_, pk := btcec.PrivKeyFromBytes(b)
	secret = hex.EncodeToString(b)
	path = filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte(secret+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path, secret, hex.EncodeToString(schnorr.SerializePubKey(pk))
}

// TestDaemonAuth runs the daemon over three relays that serve only
// authenticated clients: one takes the top-level auth_key_file, one is
// whitelisted for its relay's own auth_key_file, and one is whitelisted
// for a key the daemon does not have. The first two are archived
// completely; the third says restricted in /status; no key appears in
// the logs or the archive.
func TestDaemonAuth(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	cache, _ := os.UserCacheDir()
	gen := func(seed uint64) *testrelay.Fixture {
		f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: seed, Events: 400, CacheDir: filepath.Join(cache, "archiver-test-fixtures")})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	fa, fb := gen(31), gen(32)
	topFile, topSecret, _ := keyFile(t, 5, 0o600)
	ownFile, ownSecret, ownPub := keyFile(t, 6, 0o600)
	_, _, otherPub := keyFile(t, 7, 0o600)
	start := func(o testrelay.Options, f *testrelay.Fixture) *testrelay.Relay {
		r, err := testrelay.New(o)
		if err != nil {
			t.Fatal(err)
		}
		r.Add(f.Items...)
		t.Cleanup(func() { r.Close() })
		return r
	}
	ra := start(testrelay.Options{AuthRequired: true}, fa)
	rb := start(testrelay.Options{AuthRequired: true, AuthAllow: []string{ownPub}}, fb)
	rc := start(testrelay.Options{AuthRequired: true, AuthAllow: []string{otherPub}}, fa)

	dir := t.TempDir()
	cfg, err := config.Load("", config.Overrides{DataDir: dir, Listen: "127.0.0.1:0", Relays: []string{ra.URL(), rb.URL(), rc.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.AuthKeyFile = topFile
	cfg.Relays[1].AuthKeyFile = ownFile
	for i := range cfg.Relays {
		cfg.Relays[i].Live = false
	}
	cfg.Limits.MinFreeDiskBytes = 0
	core, logs := observer.New(zapcore.DebugLevel)
	d, err := New(Options{Config: cfg, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	want := map[string]string{ra.URL(): crawl.FinishDrained, rb.URL(): crawl.FinishDrained, rc.URL(): crawl.FinishRestricted}
	var st *Status
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		st = getStatus(t, d.Addr())
		got := 0
		for _, r := range st.Relays {
			if r.LastFinish == want[r.Relay.URL] {
				got++
			}
		}
		if got == len(want) && st.Valid == int64(len(fa.Valid)+len(fb.Valid)) && st.Pending == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	for _, r := range st.Relays {
		if r.LastFinish != want[r.Relay.URL] {
			t.Errorf("%s: %s (%s), want %s", r.Relay.URL, r.LastFinish, r.LastDetail, want[r.Relay.URL])
		}
	}
	if st.Valid != int64(len(fa.Valid)+len(fb.Valid)) {
		t.Errorf("%d valid events archived, want %d", st.Valid, len(fa.Valid)+len(fb.Valid))
	}
	for _, e := range logs.All() {
		line := e.Message
		for _, f := range e.Context {
			line += " " + f.String + " " + f.Key
			if f.Interface != nil {
				line += " " + toString(f.Interface)
			}
		}
		for _, s := range []string{topSecret, ownSecret} {
			if strings.Contains(strings.ToLower(line), s) {
				t.Errorf("log line shows a secret key: %s", e.Message)
			}
		}
	}
	_ = filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, s := range []string{topSecret, ownSecret} {
			raw, _ := hex.DecodeString(s)
			if bytes.Contains(b, []byte(s)) || bytes.Contains(b, raw) {
				t.Errorf("%s holds a secret key", p)
			}
		}
		return nil
	})
}

func toString(v any) string {
	if s, ok := v.(interface{ Error() string }); ok {
		return s.Error()
	}
	if s, ok := v.(interface{ String() string }); ok {
		return s.String()
	}
	return ""
}

// A key file every user may read stops the daemon before it opens the
// archive, and a reload that names one is refused (the running keys stay).
func TestDaemonRefusesWorldReadableKey(t *testing.T) {
	world, _, _ := keyFile(t, 9, 0o644)
	good, _, _ := keyFile(t, 10, 0o600)
	dir := filepath.Join(t.TempDir(), "archive")
	cfg, err := config.Load("", config.Overrides{DataDir: dir, Listen: "127.0.0.1:0", Relays: []string{"ws://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.AuthKeyFile = world
	if _, err := New(Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), "readable by every user") {
		t.Fatalf("New with a world-readable key: %v", err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("the archive was created anyway")
	}

	cfg.AuthKeyFile = good
	next := *cfg
	next.AuthKeyFile = world
	d, err := New(Options{Config: cfg, Reload: func() (*config.Config, error) { return &next, nil }})
	if err != nil {
		t.Fatal(err)
	}
	before := d.auth.Load()
	if err := d.Reload(); err == nil || !strings.Contains(err.Error(), "readable by every user") {
		t.Errorf("reload with a world-readable key: %v", err)
	}
	if d.auth.Load() != before || before == nil {
		t.Error("a refused reload changed the keys")
	}
	d.ln.Close()
	d.store.Close()
}
