package serve_test

import (
	"encoding/json"
	"testing"

	"github.com/nostr-archiver/archiver/internal/relayclient"
)

// The tests talk to the server with relayclient.
type client = relayclient.Client

// dial connects to url; the client reads only if read is set (a client
// that never reads is how a slow reader is made).
func dial(t testing.TB, url string, read bool) *client {
	t.Helper()
	if read {
		return relayclient.Dial(t, url)
	}
	return relayclient.DialSilent(t, url)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

const wait = relayclient.Wait
