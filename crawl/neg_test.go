package crawl

import (
	"slices"
	"testing"

	"github.com/nostr-archiver/archiver/negentropy"
	"github.com/nostr-archiver/archiver/relayconn"
)

func TestNegErrorClassify(t *testing.T) {
	for _, tc := range []struct {
		reason  string
		blocked bool
		limit   int
		closed  bool
	}{
		{"blocked: too many records", true, 0, false},
		{"blocked: too many records, max 5000", true, 5000, false},
		{"ERROR: blocked: this query is too big (limit 100000)", true, 100000, false},
		{"closed: idle timeout", false, 0, true},
		{"ERROR: closed: idle", false, 0, true},
		{"error: negentropy disabled", false, 0, false},
		{"auth-required: sign in", false, 0, false},
	} {
		e := &relayconn.NegError{Reason: tc.reason}
		blocked, limit := e.Blocked()
		if blocked != tc.blocked || limit != tc.limit || e.Closed() != tc.closed {
			t.Errorf("%q: blocked %v limit %d closed %v, want %v %d %v", tc.reason, blocked, limit, e.Closed(), tc.blocked, tc.limit, tc.closed)
		}
	}
}

func TestSplitWindows(t *testing.T) {
	var items []negentropy.Item
	for ts := uint64(100); ts < 200; ts++ { // one id per second in [100, 199]
		items = append(items, negentropy.Item{Timestamp: ts})
	}
	const now = 1000
	for _, tc := range []struct {
		name  string
		w     window
		limit int
		want  []window
	}{
		{"single second", window{since: 150, until: 150}, 0, nil},
		{"halves", window{since: 100, until: 199}, 0, []window{{since: 100, until: 149}, {since: 150, until: 199}}},
		{"unbounded: now + 1 day first", window{since: 100, until: maxUntil}, 0, []window{{since: 100, until: now + 86400}, {since: now + 86401, until: maxUntil}}},
		{"by the archive's count", window{since: 100, until: 199}, 80, []window{{since: 100, until: 139}, {since: 140, until: 179}, {since: 180, until: 199}}},
		{"cap above the count: halves", window{since: 100, until: 199}, 1000, []window{{since: 100, until: 149}, {since: 150, until: 199}}},
	} {
		if got := split(tc.w, items, tc.limit, now); !slices.Equal(got, tc.want) {
			t.Errorf("%s: split %+v = %+v, want %+v", tc.name, tc.w, got, tc.want)
		}
	}
	if got := firstWindows(0, maxUntil, items, 0); len(got) != 1 {
		t.Errorf("no cap known: %d first windows, want 1", len(got))
	}
	if got := firstWindows(0, maxUntil, items, 50); len(got) != 4 || got[0].since != 0 || got[3].until != maxUntil {
		t.Errorf("cap 50 over 100 ids: first windows %+v, want 4 covering [0, max]", got)
	}
}

func TestMergeProofs(t *testing.T) {
	old := []NegProof{{Since: 0, Until: 99, At: 1}, {Since: 500, Until: 600, At: 1}}
	fresh := []NegProof{{Since: 200, Until: 299, At: 7}, {Since: 0, Until: 99, At: 5}, {Since: 100, Until: 199, At: 6}}
	got := mergeProofs(old, fresh)
	want := []NegProof{{Since: 500, Until: 600, At: 1}, {Since: 0, Until: 299, At: 5}}
	if !slices.Equal(got, want) {
		t.Errorf("merged %+v, want %+v", got, want)
	}
}
