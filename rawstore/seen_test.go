package rawstore

import (
	"context"
	"slices"
	"testing"
	"time"
)

// clock is a settable store clock.
type clock struct{ t int64 }

func (c *clock) now() time.Time { return time.Unix(c.t, 0) }

func openClocked(t *testing.T, c *clock) *Store {
	t.Helper()
	s, err := Open(Options{Dir: t.TempDir(), Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestFirstSeen: each source's time is when it first served the id; a
// later sighting by the same source never moves it, including after the
// merge operands are compacted together.
func TestFirstSeen(t *testing.T) {
	c := &clock{}
	s := openClocked(t, c)
	a, _ := s.RelayIndex("wss://a")
	b, _ := s.RelayIndex("wss://b")
	d, _ := s.RelayIndex("wss://d")
	alt, _ := s.RelayIndex("wss://alt")
	for _, step := range []struct {
		at    int64
		relay uint32
		raw   string
	}{
		{1000, a, "good1"},
		{2000, b, "good1"},
		{3000, b, "good1"}, // again: b stays at 2000
		{3500, a, "good1"}, // the first source again: nothing written
		{4000, d, "good1"},
		{5000, alt, "bad1-other-bytes"},
	} {
		c.t = step.at
		mustIngest(t, s, &Batch{Relay: step.relay, Events: []Copy{{ID: id(1), Raw: []byte(step.raw)}}})
	}
	check := func(when string) {
		t.Helper()
		h, err := s.Lookup(id(1))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(h.Sources, []uint32{a, b, d, alt}) || !slices.Equal(h.Seen, []int64{1000, 2000, 4000, 5000}) {
			t.Fatalf("%s: sources %v seen %v", when, h.Sources, h.Seen)
		}
		if len(h.Alternates) != 1 || h.Alternates[0].Seen != 5000 {
			t.Fatalf("%s: alternates %+v", when, h.Alternates)
		}
	}
	check("fresh")
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	c.t = 6000
	mustIngest(t, s, &Batch{Relay: b, Events: []Copy{{ID: id(1), Raw: []byte("good1")}}})
	if err := s.db.Compact(context.Background(), []byte{prefixProven}, []byte{prefixProven + 1}, false); err != nil {
		t.Fatal(err)
	}
	check("compacted")
}

// TestFirstSeenPromoted: a valid alternate replacing an invalid primary
// brings its own source and time.
func TestFirstSeenPromoted(t *testing.T) {
	c := &clock{t: 100}
	s := openClocked(t, c)
	a, _ := s.RelayIndex("wss://a")
	b, _ := s.RelayIndex("wss://b")
	mustIngest(t, s, &Batch{Relay: a, Events: []Copy{{ID: id(1), Raw: []byte("bad")}}})
	drain(t, s, judgeByContent)
	c.t = 200
	mustIngest(t, s, &Batch{Relay: b, Events: []Copy{{ID: id(1), Raw: []byte("good")}}})
	drain(t, s, judgeByContent)
	h, err := s.Lookup(id(1))
	if err != nil {
		t.Fatal(err)
	}
	if h.Verdict != "valid" || h.PrimaryRelay != b || len(h.Seen) == 0 || h.Seen[0] != 200 {
		t.Fatalf("promoted: %+v", h)
	}
}

// TestFirstSeenOldArchive: records written before the times (version 1
// E values, empty R values) read as unknown, and stay unknown when the
// same source serves the id again.
func TestFirstSeenOldArchive(t *testing.T) {
	c := &clock{t: 9000}
	s := openClocked(t, c)
	a, _ := s.RelayIndex("wss://a")
	b, _ := s.RelayIndex("wss://b")
	k := id(1)
	if err := s.db.Set(eventKey(&k), eventValue(a, 0, []byte("good1")), nil); err != nil {
		t.Fatal(err)
	}
	s.ids.add(&k) // as opening an old archive would have (the filter is built from its E keys)
	if err := s.db.Set(provKey(&k, b), nil, nil); err != nil {
		t.Fatal(err)
	}
	res := mustIngest(t, s, &Batch{Relay: b, Events: []Copy{{ID: k, Raw: []byte("good1")}}})
	if res.Duplicates != 1 {
		t.Fatalf("old copy not matched: %+v", res)
	}
	h, err := s.Lookup(k)
	if err != nil {
		t.Fatal(err)
	}
	if string(h.Primary) != "good1" || !slices.Equal(h.Seen, []int64{0, 0}) {
		t.Fatalf("old archive: primary %q seen %v", h.Primary, h.Seen)
	}
}
