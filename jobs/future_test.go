package jobs

import (
	"testing"
	"time"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/testrelay"
)

// Issue 11: a fleet job without until archives events dated after now (1
// minute to 1 day ahead, and centuries ahead), whole or split into
// shards: the newest shard is open. On main both lost the 55.
func TestOpenJobArchivesFutureEvents(t *testing.T) {
	// Dated around the real clock, so not cached: 1,555 signatures.
	now := time.Now().Unix()
	f, err := testrelay.Generate(testrelay.FixtureOptions{Seed: 41, Events: 1500, Until: now, Since: now - 7*24*3600, Future: 50, FarFuture: 5})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		split func(*WorkerOptions)
	}{
		{"whole", nil},
		{"split", func(o *WorkerOptions) { o.SplitThreshold, o.ShardCount = 3600, 4 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := runServer(t, nil)
			relay := startRelay(t, f, testrelay.Options{SupportCount: true})
			n := startNode(t, srv.ClientURL(), "n1", tc.split)
			_, js := connect(t, srv.ClientURL())
			ctx := testCtx(t)
			if _, _, err := EnsureStream(ctx, js, subjects); err != nil {
				t.Fatal(err)
			}
			j := &Job{ID: "open", Relays: []string{relay.URL()}, Filter: Filter{Since: f.Since}, Mode: ModeBackfill}
			if _, err := Submit(ctx, js, subjects, j); err != nil {
				t.Fatal(err)
			}
			r, err := Wait(ctx, js, subjects, "open", 100*time.Millisecond)
			if err != nil {
				t.Fatalf("Wait: %v (report %+v)", err, r)
			}
			finishes := []string{r.Job.Finish}
			if tc.split != nil {
				finishes = finishes[:0]
				if refs := r.Job.Shards; len(refs) != 4 || !refs[len(refs)-1].Open {
					t.Errorf("shards %+v: want 4, the newest open", refs)
				}
				for _, s := range r.Shards {
					finishes = append(finishes, s.Finish)
				}
			}
			for _, fin := range finishes {
				if fin != crawl.FinishDrained {
					t.Errorf("finish %q, want drained", fin)
				}
			}
			assertExactly(t, n.valid(t), f)
		})
	}
}
