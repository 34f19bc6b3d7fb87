package negentropy

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestVarint(t *testing.T) {
	cases := []struct {
		v   uint64
		enc []byte
	}{
		{0, []byte{0x00}},
		{1, []byte{0x01}},
		{127, []byte{0x7f}},
		{128, []byte{0x81, 0x00}},
		{300, []byte{0x82, 0x2c}},
		{16384, []byte{0x81, 0x80, 0x00}},
		{MaxTimestamp, []byte{0x81, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
	}
	for _, c := range cases {
		if got := AppendVarint(nil, c.v); !bytes.Equal(got, c.enc) {
			t.Errorf("AppendVarint(%d) = %x, want %x", c.v, got, c.enc)
		}
		r := &reader{b: c.enc}
		if got, err := r.varint(); err != nil || got != c.v || len(r.b) != 0 {
			t.Errorf("varint(%x) = %d, %v (left %d), want %d", c.enc, got, err, len(r.b), c.v)
		}
	}
	for _, bad := range [][]byte{{}, {0x80}, {0x82, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, bytes.Repeat([]byte{0xff}, 11)} {
		r := &reader{b: bad}
		if _, err := r.varint(); !errors.Is(err, ErrMalformed) {
			t.Errorf("varint(%x) err = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestFingerprintEmpty(t *testing.T) {
	// sha256 of 32 zero bytes and varint(0), first 16 bytes.
	want := []byte{0x7f, 0x9c, 0x4b, 0x62, 0xcb, 0x25, 0x91, 0x59, 0x41, 0xfb, 0x2c, 0x64, 0x86, 0xc4, 0x1d, 0x3c}
	if got := Fingerprint(nil); !bytes.Equal(got[:], want) {
		t.Errorf("Fingerprint(nil) = %x, want %x", got, want)
	}
	// The sum is mod 2^256: 0xff..ff + 1 wraps to zero, so it equals an
	// all-zero id with the same count.
	var ones, one, zero Item
	for i := range ones.ID {
		ones.ID[i] = 0xff
	}
	one.ID[0] = 1
	if Fingerprint([]Item{ones, one}) != Fingerprint([]Item{zero, zero}) {
		t.Error("fingerprint sum does not wrap mod 2^256 with carries")
	}
}

// randSets returns a shared base and two sides differing by a few items.
func randSets(r *rand.Rand, n int, onlyA, onlyB float64, sameSecond bool) (a, b []Item, wantHave, wantNeed [][32]byte) {
	for i := 0; i < n; i++ {
		var it Item
		it.Timestamp = uint64(1_700_000_000 + r.IntN(max(1, n/3)))
		if sameSecond {
			it.Timestamp = 1_700_000_000
			it.ID[0] = byte(r.IntN(2)) // long shared prefixes need long bounds
		}
		for j := 1; j < 32; j++ {
			it.ID[j] = byte(r.Uint32())
		}
		switch p := r.Float64(); {
		case p < onlyA:
			a = append(a, it)
			wantHave = append(wantHave, it.ID)
		case p < onlyA+onlyB:
			b = append(b, it)
			wantNeed = append(wantNeed, it.ID)
		default:
			a, b = append(a, it), append(b, it)
		}
	}
	return SortItems(a), SortItems(b), sortIDs(wantHave), sortIDs(wantNeed)
}

func sortIDs(ids [][32]byte) [][32]byte {
	slices.SortFunc(ids, func(x, y [32]byte) int { return bytes.Compare(x[:], y[:]) })
	return slices.Compact(ids)
}

// run reconciles initiator items a against responder items b.
func run(t *testing.T, a, b []Item, limitA, limitB int) (have, need [][32]byte, rounds int) {
	t.Helper()
	ia, err := New(a, limitA)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := New(b, limitB)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := ia.Initiate()
	if err != nil {
		t.Fatal(err)
	}
	for msg != nil {
		rounds++
		if rounds > 5000 {
			t.Fatal("no convergence after 5000 rounds")
		}
		if limitA != 0 && len(msg) > limitA {
			t.Fatalf("initiator message of %d bytes over limit %d", len(msg), limitA)
		}
		ans, err := rb.Respond(msg)
		if err != nil {
			t.Fatal(err)
		}
		if limitB != 0 && len(ans) > limitB {
			t.Fatalf("responder message of %d bytes over limit %d", len(ans), limitB)
		}
		if msg, err = ia.Reconcile(ans, &have, &need); err != nil {
			t.Fatal(err)
		}
	}
	return sortIDs(have), sortIDs(need), rounds
}

func TestReconcileRandom(t *testing.T) {
	cases := []struct {
		name           string
		n              int
		onlyA, onlyB   float64
		limitA, limitB int
		sameSecond     bool
	}{
		{"empty", 0, 0, 0, 0, 0, false},
		{"identical", 5000, 0, 0, 0, 0, false},
		{"a empty", 3000, 0, 1, 0, 0, false},
		{"b empty", 3000, 1, 0, 0, 0, false},
		{"1% missing", 20000, 0, 0.01, 0, 0, false},
		{"both sides", 20000, 0.05, 0.05, 0, 0, false},
		{"frame limits", 20000, 0.2, 0.2, 4096, 4096, false},
		{"responder limit only", 20000, 0, 0.5, 0, 8192, false},
		{"one second", 5000, 0.01, 0.01, 4096, 0, true},
		{"tiny", 3, 0.3, 0.3, 0, 0, false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(i), 77))
			a, b, wantHave, wantNeed := randSets(r, c.n, c.onlyA, c.onlyB, c.sameSecond)
			have, need, rounds := run(t, a, b, c.limitA, c.limitB)
			if !slices.Equal(have, wantHave) || !slices.Equal(need, wantNeed) {
				t.Fatalf("have %d need %d, want have %d need %d", len(have), len(need), len(wantHave), len(wantNeed))
			}
			t.Logf("%d items, %d rounds, have %d need %d", c.n, rounds, len(have), len(need))
		})
	}
}

func TestVersionMismatch(t *testing.T) {
	rb, _ := New(nil, 0)
	ans, err := rb.Respond([]byte{0x62})
	if err != nil || !bytes.Equal(ans, []byte{Version}) {
		t.Errorf("responder to 0x62: %x, %v; want 61, nil", ans, err)
	}
	ia, _ := New(nil, 0)
	if _, err := ia.Initiate(); err != nil {
		t.Fatal(err)
	}
	var have, need [][32]byte
	if _, err := ia.Reconcile([]byte{0x62}, &have, &need); !errors.Is(err, ErrVersion) {
		t.Errorf("initiator on 0x62: err %v, want ErrVersion", err)
	}
	if _, err := ia.Reconcile([]byte{0x12}, &have, &need); !errors.Is(err, ErrMalformed) {
		t.Errorf("initiator on 0x12: err %v, want ErrMalformed", err)
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New(nil, 100); err == nil {
		t.Error("frame limit 100 accepted")
	}
	if _, err := New([]Item{{Timestamp: 2}, {Timestamp: 1}}, 0); err == nil {
		t.Error("unsorted items accepted")
	}
}

func fuzzItems() []Item {
	r := rand.New(rand.NewPCG(1, 2))
	a, _, _, _ := randSets(r, 200, 0, 0, false)
	return a
}

// FuzzRespond feeds untrusted bytes to both sides: no panic, and any
// answer a responder gives is itself a message an initiator can decode.
func FuzzRespond(f *testing.F) {
	items := fuzzItems()
	ia, _ := New(items, 0)
	first, _ := ia.Initiate()
	f.Add(first)
	f.Add([]byte{0x61})
	f.Add([]byte{0x61, 0x00, 0x00, 0x02, 0x01})
	f.Add([]byte{0x61, 0x05, 0x21})
	rb, _ := New(items[:100], 4096)
	ans, _ := rb.Respond(first)
	f.Add(ans)
	f.Fuzz(func(t *testing.T, msg []byte) {
		rb, _ := New(items, 4096)
		ans, err := rb.Respond(msg)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if len(ans) > 4096 {
			t.Fatalf("answer of %d bytes over the limit", len(ans))
		}
		ia, _ := New(items[:150], 0)
		if _, err := ia.Initiate(); err != nil {
			t.Fatal(err)
		}
		var have, need [][32]byte
		if _, err := ia.Reconcile(ans, &have, &need); err != nil {
			t.Fatalf("our own answer %x does not decode: %v", ans, err)
		}
		ia2, _ := New(items, 0)
		_, _ = ia2.Initiate()
		_, _ = ia2.Reconcile(msg, &have, &need)
	})
}
