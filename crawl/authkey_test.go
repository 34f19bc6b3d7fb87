package crawl

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bech32Encode is the test's encoder, the inverse of bech32Decode.
func bech32Encode(hrp string, data []byte) string {
	var five []byte
	var acc uint32
	bits := 0
	for _, b := range data {
		acc = acc<<8 | uint32(b)
		bits += 8
		for bits >= 5 {
			bits -= 5
			five = append(five, byte(acc>>bits)&31)
		}
	}
	if bits > 0 {
		five = append(five, byte(acc<<(5-bits))&31)
	}
	values := make([]byte, 0, 2*len(hrp)+1+len(five)+6)
	for i := 0; i < len(hrp); i++ {
		values = append(values, hrp[i]>>5)
	}
	values = append(values, 0)
	for i := 0; i < len(hrp); i++ {
		values = append(values, hrp[i]&31)
	}
	values = append(values, five...)
	values = append(values, 0, 0, 0, 0, 0, 0)
	mod := bech32Polymod(values) ^ 1
	out := []byte(hrp + "1")
	for _, v := range five {
		out = append(out, bech32Charset[v])
	}
	for i := range 6 {
		out = append(out, bech32Charset[(mod>>(5*(5-i)))&31])
	}
	return string(out)
}

// The NIP-19 example key, in both forms.
const (
	nip19Hex  = "67dea2ed018072d675f5415ecfaed7d2597555e202d85b3d65ea4e58d2d92ffa"
	nip19Nsec = "nsec1vl029mgpspedva04g90vltkh6fvh240zqtv9k0t9af8935ke9laqsnlfe5"
)

func TestParseAuthKey(t *testing.T) {
	if got := bech32Encode("nsec", mustDecodeHex(t, nip19Hex)); got != nip19Nsec {
		t.Fatalf("test encoder: %s, want the NIP-19 example %s", got, nip19Nsec)
	}
	typo := []byte(nip19Nsec)
	if typo[20] == 'q' {
		typo[20] = 'p'
	} else {
		typo[20] = 'q'
	}
	for _, tc := range []struct {
		name, in string
		ok       bool
		err      string
	}{
		{"hex", nip19Hex, true, ""},
		{"hex, upper case, newline", strings.ToUpper(nip19Hex) + "\n", true, ""},
		{"nsec", nip19Nsec, true, ""},
		{"nsec, upper case", strings.ToUpper(nip19Nsec), true, ""},
		{"nsec, surrounding space", "  " + nip19Nsec + "\r\n", true, ""},
		{"nsec with a typo", string(typo), false, "checksum"},
		{"nsec, mixed case", "N" + nip19Nsec[1:], false, "bech32"},
		{"npub", bech32Encode("npub", mustDecodeHex(t, nip19Hex)), false, "public key"},
		{"other hrp", bech32Encode("nsec1x", mustDecodeHex(t, nip19Hex)), false, "does not hold"},
		{"short nsec", bech32Encode("nsec", mustDecodeHex(t, nip19Hex)[:31]), false, "32-byte"},
		{"hex with a non-hex digit", nip19Hex[:63] + "g", false, "hex digits"},
		{"hex, 63 digits", nip19Hex[:63], false, "63 characters"},
		{"zero", strings.Repeat("0", 64), false, "out of range"},
		{"empty", "", false, "0 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := ParseAuthKey(tc.in)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				want, _ := ParseAuthKey(nip19Hex)
				if k.PublicKey() != want.PublicKey() {
					t.Fatalf("pubkey %x, want %x", k.PublicKey(), want.PublicKey())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want one saying %q", err, tc.err)
			}
			if s := strings.TrimSpace(tc.in); len(s) > 8 && strings.Contains(strings.ToLower(err.Error()), strings.ToLower(s[8:])) {
				t.Fatalf("error %q quotes the key", err)
			}
		})
	}
}

func mustDecodeHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeKey(t *testing.T, dir, name, text string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

func TestReadAuthKeyFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		mode os.FileMode
		text string
		err  string
	}{
		{"owner only", 0o600, nip19Nsec + "\n", ""},
		{"group readable", 0o640, nip19Hex, ""},
		{"world readable", 0o644, nip19Hex, "readable by every user (mode 0644): run `chmod 600"},
		{"world readable, not even a key", 0o604, "hello", "readable by every user"},
		{"not a key", 0o600, "hello", "want 64 hex digits"},
		{"too large", 0o600, strings.Repeat("a", 5000), "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeKey(t, dir, strings.ReplaceAll(tc.name, " ", "_"), tc.text, tc.mode)
			k, err := ReadAuthKeyFile(p)
			if tc.err == "" {
				if err != nil || k == nil {
					t.Fatalf("%v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), p) {
				t.Fatalf("error %v, want one naming %s and saying %q", err, p, tc.err)
			}
		})
	}
	if _, err := ReadAuthKeyFile(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a directory: %v", err)
	}
}

// TestLoadAuthKeys: a key file beats the environment, which beats the
// systemd credential; per-relay files override the default for their
// relay only; no source at all means no keys.
func TestLoadAuthKeys(t *testing.T) {
	dir := t.TempDir()
	keyHex := func(seed byte) string { return strings.Repeat(hex.EncodeToString([]byte{seed}), 32) }
	fileKey := writeKey(t, dir, "file", keyHex(1), 0o600)
	relayKey := writeKey(t, dir, "relay", keyHex(2), 0o600)
	credDir := filepath.Join(dir, "creds")
	if err := os.Mkdir(credDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeKey(t, credDir, AuthKeyCredential, keyHex(3), 0o400)
	pub := func(h string) [32]byte {
		k, err := ParseAuthKey(h)
		if err != nil {
			t.Fatal(err)
		}
		return k.PublicKey()
	}
	for _, tc := range []struct {
		name     string
		file     string
		perRelay map[string]string
		env      map[string]string
		want     string // the default key, "" for none
		relay    string // the key of wss://relay.example
		none     bool
	}{
		{name: "nothing", none: true},
		{name: "file", file: fileKey, want: keyHex(1), relay: keyHex(1)},
		{name: "file beats env and credential", file: fileKey, env: map[string]string{EnvAuthKey: keyHex(4), "CREDENTIALS_DIRECTORY": credDir}, want: keyHex(1), relay: keyHex(1)},
		{name: "env beats credential", env: map[string]string{EnvAuthKey: keyHex(4), "CREDENTIALS_DIRECTORY": credDir}, want: keyHex(4), relay: keyHex(4)},
		{name: "credential", env: map[string]string{"CREDENTIALS_DIRECTORY": credDir}, want: keyHex(3), relay: keyHex(3)},
		{name: "credential directory without the key", env: map[string]string{"CREDENTIALS_DIRECTORY": dir + "/nothing"}, none: true},
		{name: "per relay only", perRelay: map[string]string{"relay.example": relayKey}, relay: keyHex(2)},
		{name: "per relay over env", perRelay: map[string]string{"wss://RELAY.example/": relayKey}, env: map[string]string{EnvAuthKey: keyHex(4)}, want: keyHex(4), relay: keyHex(2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := LoadAuthKeys(tc.file, tc.perRelay, func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if tc.none {
				if keys != nil {
					t.Fatalf("keys %+v, want none", keys)
				}
				return
			}
			if got := keys.For("wss://other.example"); (got == nil) != (tc.want == "") || got != nil && got.PublicKey() != pub(tc.want) {
				t.Errorf("default key %v, want %s", got, tc.want)
			}
			if got := keys.For("wss://relay.example"); got == nil || got.PublicKey() != pub(tc.relay) {
				t.Errorf("relay's key %v", got)
			}
		})
	}
	if _, err := LoadAuthKeys("", nil, func(k string) string { return map[string]string{EnvAuthKey: "nsec1bad"}[k] }); err == nil || !strings.Contains(err.Error(), EnvAuthKey) {
		t.Errorf("a bad $%s: %v", EnvAuthKey, err)
	}
}

func TestParseAuthKeyFlags(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       []string
		file     string
		perRelay map[string]string
		err      string
	}{
		{name: "none"},
		{name: "one path", in: []string{"/k"}, file: "/k"},
		{name: "a path with =", in: []string{"/keys/a=b"}, file: "/keys/a=b"},
		{name: "per relay", in: []string{"wss://a.example=/ka", "WS://B.example:7777/=/kb", "/k"}, file: "/k",
			perRelay: map[string]string{"wss://a.example": "/ka", "ws://b.example:7777": "/kb"}},
		{name: "two defaults", in: []string{"/a", "/b"}, err: "two key files for every relay"},
		{name: "two for one relay", in: []string{"wss://a.example=/a", "wss://a.example/=/b"}, err: "two key files for wss://a.example"},
		{name: "no path", in: []string{"wss://a.example="}, err: "no path"},
		{name: "bad relay", in: []string{"wss://a b=/k"}, err: "--auth-key-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file, per, err := ParseAuthKeyFlags(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || file != tc.file || len(per) != len(tc.perRelay) {
				t.Fatalf("%q %v %v", file, per, err)
			}
			for k, v := range tc.perRelay {
				if per[k] != v {
					t.Errorf("%s: %q, want %q", k, per[k], v)
				}
			}
		})
	}
}

// FuzzBech32Decode: no input panics, and whatever decodes re-encodes to
// the same (lower-case) text.
func FuzzBech32Decode(f *testing.F) {
	f.Add(nip19Nsec)
	f.Add(strings.ToUpper(nip19Nsec))
	f.Add("a12uel5l")
	f.Add("1")
	f.Add("nsec1")
	f.Add("an83characterlonghumanreadablepartthatcontainsthenumber1andtheexcludedcharactersbio1tt5tgs")
	f.Fuzz(func(t *testing.T, s string) {
		hrp, data, err := bech32Decode(s)
		if err != nil {
			return
		}
		if got := bech32Encode(hrp, data); got != strings.ToLower(s) {
			t.Fatalf("%q decodes to %q %x, which encodes to %q", s, hrp, data, got)
		}
		_, _ = ParseAuthKey(s)
	})
}
