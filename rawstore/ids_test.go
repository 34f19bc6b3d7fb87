package rawstore

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
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

// CountServed counts a relay's events in a range: those it served first,
// those it served again (identical or differing copies), not those only
// another relay served, and only what match accepts.
func TestCountServed(t *testing.T) {
	s := openTest(t)
	a, _ := s.RelayIndex("wss://a")
	b, _ := s.RelayIndex("wss://b")
	raw := func(i int, kind int) []byte {
		ev := id(i)
		return []byte(fmt.Sprintf(`{"id":"%s","created_at":%d,"kind":%d}`, hex.EncodeToString(ev[:]), 1000+i, kind))
	}
	var ba, bb Batch
	ba.Relay, bb.Relay = a, b
	for i := 0; i < 100; i++ {
		kind := i % 2
		switch {
		case i < 40: // a only
			ba.Events = append(ba.Events, Copy{ID: id(i), Raw: raw(i, kind)})
		case i < 70: // b first, then a the same copy
			bb.Events = append(bb.Events, Copy{ID: id(i), Raw: raw(i, kind)})
		case i < 80: // b first, then a a differing copy
			bb.Events = append(bb.Events, Copy{ID: id(i), Raw: raw(i, kind)})
		default: // b only
			bb.Events = append(bb.Events, Copy{ID: id(i), Raw: raw(i, kind)})
		}
	}
	mustIngest(t, s, &bb)
	for i := 40; i < 80; i++ {
		r := raw(i, i%2)
		if i >= 70 {
			r = append(r[:len(r)-1:len(r)-1], `,"x":1}`...)
		}
		ba.Events = append(ba.Events, Copy{ID: id(i), Raw: r})
	}
	mustIngest(t, s, &ba)
	odd := func(raw []byte) bool {
		return strings.HasSuffix(string(raw), `"kind":1}`) || strings.HasSuffix(string(raw), `"kind":1,"x":1}`)
	}
	cases := []struct {
		relay        uint32
		since, until uint64
		match        func([]byte) bool
		want         int64
	}{
		{a, 0, ^uint64(0), nil, 80},
		{b, 0, ^uint64(0), nil, 60},
		{a, 1030, 1049, nil, 20},
		{a, 1075, 1090, nil, 5},
		{b, 1075, 1090, nil, 16},
		{a, 0, ^uint64(0), odd, 40},
		{a, 2000, 3000, nil, 0},
	}
	count := func(archive string) {
		t.Helper()
		for _, c := range cases {
			got, err := s.CountServed(c.relay, c.since, c.until, c.match)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("%s: relay %d [%d, %d]: %d, want %d", archive, c.relay, c.since, c.until, got, c.want)
			}
		}
	}
	count("T values name the first relay")
	// An archive from before T values named the relay: the same counts,
	// read from the event bodies.
	b0 := s.db.NewBatch()
	if err := s.idEntries(0, ^uint64(0), func(createdAt uint64, id [32]byte, v []byte) error {
		if len(v) != 4 {
			t.Fatalf("T value of %x: %d bytes, want 4", id[:4], len(v))
		}
		return b0.Set(idsKey(createdAt, &id), nil, nil)
	}); err != nil {
		t.Fatal(err)
	}
	if err := b0.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	count("empty T values")
}

// Over more events than one sorted run of lookups, every later copy is
// still found once (runs are flushed, not dropped or counted twice).
func TestCountServedAcrossRuns(t *testing.T) {
	s := openTest(t)
	a, _ := s.RelayIndex("wss://a")
	b, _ := s.RelayIndex("wss://b")
	n := 2*servedRun + 123
	var ba, bb Batch
	ba.Relay, bb.Relay = a, b
	for i := 0; i < n; i++ {
		ev := id(i)
		raw := []byte(fmt.Sprintf(`{"id":"%s","created_at":%d,"kind":1}`, hex.EncodeToString(ev[:]), 1000+i))
		ba.Events = append(ba.Events, Copy{ID: ev, Raw: raw})
		if i%3 == 0 {
			bb.Events = append(bb.Events, Copy{ID: ev, Raw: raw})
		}
	}
	mustIngest(t, s, &ba)
	mustIngest(t, s, &bb)
	for _, c := range []struct {
		relay uint32
		want  int64
	}{{a, int64(n)}, {b, int64((n + 2) / 3)}} {
		if got, err := s.CountServed(c.relay, 0, ^uint64(0), nil); err != nil || got != c.want {
			t.Errorf("relay %d: %d, %v; want %d", c.relay, got, err, c.want)
		}
	}
}
