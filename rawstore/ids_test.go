package rawstore

import (
	"encoding/hex"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

type idAt struct {
	ts uint64
	id [32]byte
}

func listIDs(t *testing.T, s *Store, since, until uint64) []idAt {
	t.Helper()
	var out []idAt
	if err := s.IDsInRange(since, until, func(ts uint64, id [32]byte) error {
		out = append(out, idAt{ts, id})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestIDsInRange(t *testing.T) {
	s := openTest(t)
	relay, _ := s.RelayIndex("wss://r")
	var all []idAt
	b := &Batch{Relay: relay}
	for i := 0; i < 300; i++ {
		ts := uint64(1000 + i%100)
		ev := id(i)
		raw := fmt.Sprintf(`{"id":"%s","created_at":%d,"kind":1}`, hex.EncodeToString(ev[:]), ts)
		if i == 7 { // escaped key: the scanner hands over to the decoder
			raw = fmt.Sprintf(`{"i\u0064":"%s","created_at":%d}`, hex.EncodeToString(ev[:]), ts)
		}
		b.Events = append(b.Events, Copy{ID: ev, Raw: []byte(raw)})
		all = append(all, idAt{ts, ev})
	}
	b.Events = append(b.Events, Copy{ID: id(999), Raw: []byte(`{"created_at":"soon"}`)}) // unreadable: not listed
	mustIngest(t, s, b)
	cmp := func(x, y idAt) int {
		if x.ts != y.ts {
			return int(x.ts) - int(y.ts)
		}
		return slices.Compare(x.id[:], y.id[:])
	}
	slices.SortFunc(all, cmp)
	want := func(since, until uint64) []idAt {
		var w []idAt
		for _, x := range all {
			if x.ts >= since && x.ts <= until {
				w = append(w, x)
			}
		}
		return w
	}
	cases := []struct{ since, until uint64 }{{0, ^uint64(0)}, {1000, 1000}, {1050, 1060}, {1099, 5000}, {2000, 3000}}
	for _, c := range cases {
		if got := listIDs(t, s, c.since, c.until); !slices.Equal(got, want(c.since, c.until)) {
			t.Errorf("[%d, %d]: %d ids, want %d", c.since, c.until, len(got), len(want(c.since, c.until)))
		}
	}

	// A store from before the index: no T keys, no mark. The first listing
	// builds it from the event bodies.
	if err := s.db.DeleteRange([]byte{prefixIDs}, []byte{prefixIDs + 1}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Delete(idIndexKey, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.idIndexed.Store(false)
	if got := listIDs(t, s, 0, ^uint64(0)); !slices.Equal(got, all) {
		t.Errorf("after rebuild: %d ids, want %d", len(got), len(all))
	}
}
