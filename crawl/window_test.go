package crawl

import (
	"slices"
	"testing"
)

func TestAddSpan(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spans []Span
		add   Span
		want  []Span
	}{
		{"into none", nil, Span{5, 9, 0}, []Span{{5, 9, 0}}},
		{"apart, below", []Span{{10, 20, 0}}, Span{1, 8, 0}, []Span{{1, 8, 0}, {10, 20, 0}}},
		{"touching joins", []Span{{10, 20, 0}}, Span{21, 30, 0}, []Span{{10, 30, 0}}},
		{"touching below joins", []Span{{10, 20, 0}}, Span{1, 9, 0}, []Span{{1, 20, 0}}},
		{"inside", []Span{{10, 20, 0}}, Span{12, 15, 0}, []Span{{10, 20, 0}}},
		{"bridges two", []Span{{1, 5, 0}, {10, 20, 0}, {40, 50, 0}}, Span{6, 30, 0}, []Span{{1, 30, 0}, {40, 50, 0}}},
		{"open top swallows", []Span{{1, 5, 0}, {10, 20, 0}}, Span{3, 1<<63 - 1, 0}, []Span{{1, 1<<63 - 1, 0}}},
		{"seen adds up", []Span{{1, 5, 3}, {10, 20, 4}}, Span{6, 9, 2}, []Span{{1, 20, 9}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := addSpan(slices.Clone(tc.spans), tc.add); !slices.Equal(got, tc.want) {
				t.Errorf("addSpan(%v, %v) = %v, want %v", tc.spans, tc.add, got, tc.want)
			}
		})
	}
}

// A window narrows on full pages until a page is short, then widens: the
// cursor moves only past a window a short page showed whole.
func TestPageWindow(t *testing.T) {
	var w pageWindow
	since, top := int64(100), int64(1099) // 1,000 seconds
	type step struct {
		full       bool
		wantBottom int64
		narrowed   bool
	}
	for i, s := range []step{
		{full: true, wantBottom: 100, narrowed: true}, // the whole range first
		{full: true, wantBottom: 600, narrowed: true}, // half
		{full: false, wantBottom: 850},                // a quarter, short: [850, 1099] done
		{full: true, wantBottom: 350, narrowed: true}, // twice that under 849
		{full: false, wantBottom: 600},                // [600, 849] done
		{full: false, wantBottom: 100},                // [100, 599]: clamped at since
	} {
		b := w.bottom(since, top)
		if b != s.wantBottom {
			t.Fatalf("step %d: bottom %d, want %d", i, b, s.wantBottom)
		}
		if s.full {
			if got := w.narrow(b, top); got != s.narrowed {
				t.Fatalf("step %d: narrow = %v", i, got)
			}
			continue
		}
		w.widen(b, top)
		top = b - 1
	}
	// One second full: cannot narrow (a wall).
	w = pageWindow{}
	if b := w.bottom(7, 7); w.narrow(b, 7) {
		t.Error("a one-second window narrowed")
	}
}
