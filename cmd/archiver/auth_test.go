package main

import (
	"bytes"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/nostr-archiver/archiver/testrelay"
)

// runEnv is run with extra environment variables.
func runEnv(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := archiver(args...)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("archiver %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// authKey is a test key: its hex secret and hex pubkey.
func authKey(seed byte) (secret, pub string) {
	b := bytes.Repeat([]byte{seed}, 32)
	_, pk := btcec.PrivKeyFromBytes(b)
	return hex.EncodeToString(b), hex.EncodeToString(schnorr.SerializePubKey(pk))
}

// TestCrawlAuth runs `archiver crawl` against relays that serve only
// authenticated (and, for one, whitelisted) clients, with the key given
// each way the CLI takes it: each form archives exactly the relay's
// valid events and exits 0, or says why not and exits 1 (2 for a key
// file every user may read, refused before anything is created). The
// secret is never in the output, the logs (at debug level), stats, or
// the archive's files.
func TestCrawlAuth(t *testing.T) {
	t.Parallel()
	f := fixture(t, testrelay.FixtureOptions{Seed: 21, Events: 300})
	member, memberPub := authKey(7)
	outsider, _ := authKey(8)
	open := relay(t, testrelay.Options{AuthRequired: true}, f)
	closed := relay(t, testrelay.Options{AuthRequired: true, AuthAllow: []string{memberPub}}, f)

	keys := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(keys, name)
		if err := os.WriteFile(p, []byte(text+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	memberFile := write("member", member, 0o600)
	outsiderFile := write("outsider", outsider, 0o600)
	worldFile := write("world", member, 0o644)
	creds := t.TempDir()
	if err := os.WriteFile(filepath.Join(creds, "nostr-auth-key"), []byte(member), 0o400); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		args   []string
		env    []string
		code   int
		want   []string // in stderr
		drains []*testrelay.Relay
	}{
		{name: "file for every relay", args: []string{"--auth-key-file", memberFile, open.URL(), closed.URL()},
			drains: []*testrelay.Relay{open, closed}},
		{name: "file per relay", args: []string{"--auth-key-file", outsiderFile, "--auth-key-file", closed.URL() + "=" + memberFile, open.URL(), closed.URL()},
			drains: []*testrelay.Relay{open, closed}},
		{name: "environment", args: []string{closed.URL()}, env: []string{"ARCHIVER_AUTH_KEY=" + member},
			drains: []*testrelay.Relay{closed}},
		{name: "systemd credential", args: []string{closed.URL()}, env: []string{"CREDENTIALS_DIRECTORY=" + creds},
			drains: []*testrelay.Relay{closed}},
		{name: "no key", args: []string{open.URL()}, code: 1,
			want: []string{open.URL() + ": auth-required: auth-required:", "--auth-key-file"}},
		{name: "not whitelisted", args: []string{"--auth-key-file", outsiderFile, closed.URL()}, code: 1,
			want: []string{closed.URL() + ": restricted: restricted:"}},
		{name: "world-readable key file", args: []string{"--auth-key-file", worldFile, open.URL()}, code: 2,
			want: []string{worldFile + " is readable by every user (mode 0644): run `chmod 600 " + worldFile + "`"}},
		{name: "key file missing", args: []string{"--auth-key-file", filepath.Join(keys, "nope"), open.URL()}, code: 2,
			want: []string{"no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := filepath.Join(t.TempDir(), "archive")
			args := append([]string{"crawl", "--data", data, "--log-level", "debug", "--log-format", "json", "--page-timeout", "2s"}, tc.args...)
			code, stdout, stderr := runEnv(t, tc.env, args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s", code, tc.code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			for _, r := range tc.drains {
				if !strings.Contains(stderr, r.URL()+": drained") {
					t.Errorf("%s not drained:\n%s", r.URL(), stderr)
				}
			}
			if tc.drains != nil {
				assertExport(t, data, f)
			}
			var statsOut, statsErr string
			if tc.code == 2 {
				if _, err := os.Stat(data); err == nil {
					t.Errorf("a refused key created the archive")
				}
			} else {
				_, statsOut, statsErr = runEnv(t, nil, "stats", "--data", data, "--json")
			}
			for what, s := range map[string]string{"crawl stdout": stdout, "crawl stderr": stderr, "stats": statsOut + statsErr} {
				for _, secret := range []string{member, outsider} {
					if strings.Contains(strings.ToLower(s), secret) {
						t.Errorf("%s shows a secret key", what)
					}
				}
			}
			assertNoSecretIn(t, data, member, outsider)
		})
	}
}

// assertNoSecretIn fails if any file under dir holds a secret, in hex or
// as raw bytes.
func assertNoSecretIn(t *testing.T, dir string, secrets ...string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			raw, _ := hex.DecodeString(s)
			if bytes.Contains(bytes.ToLower(b), []byte(s)) || bytes.Contains(b, raw) {
				t.Errorf("%s holds a secret key", p)
			}
		}
		return nil
	})
}
