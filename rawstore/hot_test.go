package rawstore

import "testing"

func TestHotCopiesBounded(t *testing.T) {
	h := newHotCopies(1000)
	for seq := uint64(1); seq <= 100; seq++ {
		h.add(seq, 7, make([]byte, 100))
		// The budget bounds what the copies take from the allocator
		// (their size class), not only their length.
		held := 0
		for _, c := range h.byseq {
			held += cap(c.raw)
		}
		if held != h.size || held > 1000 {
			t.Fatalf("after %d adds: copies hold %d bytes, size says %d, budget 1000", seq, held, h.size)
		}
	}
	if n := len(h.byseq); n*100 > 1000 || n*112 < 1000-112 {
		t.Fatalf("%d copies of 100 bytes (112 allocated) kept in a budget of 1000", n)
	}
	if _, ok := h.take(1); ok {
		t.Fatal("the oldest copy survived eviction")
	}
	c, ok := h.take(100)
	if !ok || c.relay != 7 || len(c.raw) != 100 {
		t.Fatalf("newest copy: %+v %v", c, ok)
	}
	if _, ok := h.take(100); ok {
		t.Fatal("a copy was taken twice")
	}
	// Taking most entries keeps the FIFO bounded.
	for seq := uint64(101); seq <= 5000; seq++ {
		h.add(seq, 1, []byte{1})
		h.take(seq)
	}
	if len(h.order) > 2*len(h.byseq)+1024 {
		t.Fatalf("FIFO grew to %d for %d live copies", len(h.order), len(h.byseq))
	}
	newHotCopies(-1).add(1, 1, []byte{1}) // disabled: no panic, nothing kept
}

// Load takes a freshly ingested copy from memory, with the same bytes and
// relay the store holds.
func TestLoadFromHotCopies(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), HotBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, _ := s.RelayIndex("wss://a")
	mustIngest(t, s, &Batch{Relay: r, Events: []Copy{{ID: id(1), Raw: []byte("good1")}}})
	items, _ := s.NextPending(0, 10)
	if err := s.Load(&items[0]); err != nil || string(items[0].Raw) != "good1" || items[0].Relay != r {
		t.Fatalf("hot load: %+v %v", items[0], err)
	}
	items[0].Raw = nil
	if err := s.Load(&items[0]); err != nil || string(items[0].Raw) != "good1" {
		t.Fatalf("store load after the hot copy was taken: %+v %v", items[0], err)
	}
}
