package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/bip340"
	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/testrelay"
)

// A job on a relay that serves only whitelisted, authenticated clients
// drains on a node configured with the whitelisted key, and fails for good
// on a node without one (auth-required) or with another key (restricted).
// The job itself carries no key: each node answers with its own.
func TestJobAuth(t *testing.T) {
	srv := runServer(t, nil)
	f := fixture(t, 500)
	seed := sha256.Sum256([]byte("job key"))
	key, err := bip340.NewPrivateKey(seed[:])
	if err != nil {
		t.Fatal(err)
	}
	other := sha256.Sum256([]byte("other job key"))
	otherKey, _ := bip340.NewPrivateKey(other[:])
	pub := key.PublicKey()
	relay := startRelay(t, f, testrelay.Options{AuthRequired: true, AuthAllow: []string{hex.EncodeToString(pub[:])}})
	_, js := connect(t, srv.ClientURL())
	ctx := testCtx(t)
	if _, _, err := EnsureStream(ctx, js, subjects); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		key    *bip340.PrivateKey
		state  string
		finish string
	}{
		{"whitelisted key", key, StateDone, crawl.FinishDrained},
		{"no key", nil, StateFailed, crawl.FinishAuthRequired},
		{"other key", otherKey, StateFailed, crawl.FinishRestricted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := strings.ReplaceAll(tc.name, " ", "-")
			n := startNode(t, srv.ClientURL(), id, func(o *WorkerOptions) {
				base := o.CrawlOptions
				o.CrawlOptions = func(j *Job) crawl.Options {
					opts := base(j)
					if tc.key != nil {
						opts.AuthKeys = &crawl.AuthKeys{Default: tc.key}
					}
					return opts
				}
			})
			j := &Job{ID: id, Relays: []string{relay.URL()}, Filter: Filter{Since: f.Since, Until: f.Until}, Mode: ModeBackfill}
			if _, err := Submit(ctx, js, subjects, j); err != nil {
				t.Fatal(err)
			}
			r, err := Wait(ctx, js, subjects, id, 50*time.Millisecond)
			if drained := tc.finish == crawl.FinishDrained; r == nil || drained != (err == nil) || !drained && !errors.Is(err, ErrNotDrained) {
				t.Fatalf("Wait: %v", err)
			}
			if r.Job.State != tc.state || r.Job.Finish != tc.finish {
				t.Fatalf("job %s, finish %s (%s), want %s, %s", r.Job.State, r.Job.Finish, r.Job.Error, tc.state, tc.finish)
			}
			if r.Job.Deliveries != 1 {
				t.Errorf("delivered %d times: a refusal for want of a key is permanent", r.Job.Deliveries)
			}
			if tc.finish == crawl.FinishDrained {
				assertExactly(t, n.valid(t), f)
			}
			n.stop(t)
		})
	}
}
