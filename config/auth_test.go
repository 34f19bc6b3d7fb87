package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAuthKeys: the top-level auth_key_file is every relay's key, a
// relay's own auth_key_file is that relay's, the environment fills in
// when the file names none, and a key file every user may read is an
// error naming it. Keys are read by AuthKeys, not by Parse (which does no
// I/O): a file naming a missing key parses.
func TestAuthKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	top := write("top", strings.Repeat("01", 32), 0o600)
	own := write("own", strings.Repeat("02", 32), 0o400)
	world := write("world", strings.Repeat("03", 32), 0o644)
	env := strings.Repeat("04", 32)
	pubOf := func(t *testing.T, c *Config, relay string, getenv func(string) string) string {
		t.Helper()
		keys, err := c.AuthKeys(getenv)
		if err != nil {
			t.Fatal(err)
		}
		k := keys.For(relay)
		if k == nil {
			return ""
		}
		return k.String()
	}
	noEnv := func(string) string { return "" }
	parse := func(t *testing.T, text string) *Config {
		t.Helper()
		c, err := Parse([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	file := `auth_key_file = "` + top + `"
[[relay]]
url = "wss://a.example"
[[relay]]
url = "B.example/"
auth_key_file = "` + own + `"
`
	c := parse(t, file)
	a, b := pubOf(t, c, "wss://a.example", noEnv), pubOf(t, c, "wss://b.example", noEnv)
	if a == "" || b == "" || a == b {
		t.Fatalf("relay a's key %s, relay b's %s: want two different keys", a, b)
	}
	if job := pubOf(t, c, "wss://job.example", noEnv); job != a {
		t.Errorf("a relay of a job gets %s, want the top-level key %s", job, a)
	}

	c = parse(t, "[[relay]]\nurl = \"wss://a.example\"\n")
	if k := pubOf(t, c, "wss://a.example", noEnv); k != "" {
		t.Errorf("no key anywhere, yet %s", k)
	}
	withEnv := func(k string) string { return map[string]string{"ARCHIVER_AUTH_KEY": env}[k] }
	if k := pubOf(t, c, "wss://a.example", withEnv); k == "" {
		t.Error("$ARCHIVER_AUTH_KEY not used")
	}

	c = parse(t, "[[relay]]\nurl = \"wss://a.example\"\nauth_key_file = \""+world+"\"\n")
	if _, err := c.AuthKeys(noEnv); err == nil || !strings.Contains(err.Error(), world) || !strings.Contains(err.Error(), "readable by every user") {
		t.Errorf("world-readable relay key: %v", err)
	}
	c = parse(t, "auth_key_file = \""+filepath.Join(dir, "missing")+"\"\n[[relay]]\nurl = \"wss://a.example\"\n")
	if _, err := c.AuthKeys(noEnv); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing key file: %v", err)
	}
}
