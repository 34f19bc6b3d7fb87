package testrelay

import (
	"net/http"
	"testing"

	"github.com/nostr-archiver/archiver/internal/relayclient"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The tests talk to the relay with relayclient.
type (
	client = relayclient.Client
	msg    = relayclient.Msg
	page   = relayclient.Page
)

const wait = relayclient.Wait

var errTimeout = relayclient.ErrTimeout

func dialErr(t testing.TB, url string) (*client, *http.Response, error) {
	t.Helper()
	return relayclient.DialErr(t, url)
}

func dial(t testing.TB, url string) *client {
	t.Helper()
	return relayclient.Dial(t, url)
}

func decode(t testing.TB, b []byte) msg {
	t.Helper()
	return relayclient.Decode(t, b)
}
