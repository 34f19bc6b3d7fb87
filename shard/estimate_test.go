package shard

import (
	"math"
	"math/rand/v2"
	"testing"
)

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %g, want %g", what, got, want)
	}
}

func TestUniform(t *testing.T) {
	near(t, "[0,0]", Uniform{}.Estimate(0, 0), 1)
	near(t, "[5,14]", Uniform{}.Estimate(5, 14), 10)
	near(t, "empty", Uniform{}.Estimate(5, 4), 0)
	near(t, "whole int64", Uniform{}.Estimate(math.MinInt64, math.MaxInt64), math.Exp2(64))
}

func TestDensity(t *testing.T) {
	type obs struct {
		count     bool
		lo, hi, n int64
	}
	type query struct {
		a, b int64
		want float64
	}
	tests := []struct {
		name    string
		obs     []obs
		queries []query
	}{
		{"empty is uniform", nil, []query{{0, 9, 10}, {-5, 4, 10}, {3, 2, 0}}},
		{"one page, flat inside and beyond", []obs{{false, 0, 9, 50}},
			[]query{{0, 9, 50}, {0, 0, 5}, {10, 19, 50}, {-10, -1, 50}}},
		{"newer page replaces the overlap", []obs{{false, 0, 9, 100}, {false, 5, 14, 20}},
			[]query{{0, 4, 50}, {5, 14, 20}, {0, 14, 70}}},
		{"page inside older page keeps both remnants", []obs{{false, 0, 9, 100}, {false, 4, 5, 0}},
			[]query{{0, 3, 40}, {4, 5, 0}, {6, 9, 40}}},
		{"gap is interpolated linearly", []obs{{false, 0, 9, 10}, {false, 20, 29, 30}},
			[]query{{10, 19, 20}, {0, 29, 60}, {10, 14, 7.5}}},
		{"count spreads its rest over unpaged seconds", []obs{{false, 0, 9, 10}, {true, 0, 99, 100}},
			[]query{{0, 9, 10}, {10, 99, 90}, {0, 99, 100}, {50, 59, 10}}},
		{"count below what pages saw scales them", []obs{{false, 0, 9, 10}, {false, 10, 19, 30}, {true, 0, 19, 20}},
			[]query{{0, 9, 5}, {10, 19, 15}}},
		{"count order does not matter for precedence", []obs{{true, 0, 99, 100}, {false, 0, 9, 10}},
			[]query{{0, 9, 10}, {10, 99, 90}}},
		{"page straddling a count keeps its outside part", []obs{{false, 0, 19, 40}, {true, 10, 29, 100}},
			[]query{{0, 9, 20}, {10, 19, 20}, {20, 29, 80}}},
		{"page across two counts", []obs{{false, 0, 99, 100}, {true, 10, 19, 50}, {true, 30, 39, 0}},
			[]query{{0, 9, 10}, {10, 19, 50}, {20, 29, 10}, {30, 39, 0}, {40, 99, 60}}},
		{"newer count replaces the overlap", []obs{{true, 0, 99, 100}, {true, 50, 149, 1000}},
			[]query{{0, 49, 50}, {50, 149, 1000}}},
		{"zero count with pages", []obs{{false, 0, 9, 10}, {true, 0, 9, 0}},
			[]query{{0, 9, 0}}},
		{"count over empty pages goes to the gaps", []obs{{false, 0, 9, 0}, {true, 0, 19, 50}},
			[]query{{0, 9, 0}, {10, 19, 50}}},
		{"count fully paged with zero pages spreads by length", []obs{{false, 0, 9, 0}, {true, 0, 9, 50}},
			[]query{{0, 4, 25}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var d Density
			for _, o := range tc.obs {
				if o.count {
					d.ObserveCount(o.lo, o.hi, o.n)
				} else {
					d.ObservePage(o.lo, o.hi, int(o.n))
				}
			}
			for _, q := range tc.queries {
				near(t, "estimate", d.Estimate(q.a, q.b), q.want)
			}
		})
	}
}

func TestDensityIgnoresInvalid(t *testing.T) {
	var d Density
	d.ObservePage(10, 9, 5)
	d.ObservePage(0, 9, -1)
	d.ObserveCount(10, 9, 5)
	d.ObserveCount(0, 9, -1)
	near(t, "still uniform", d.Estimate(0, 9), 10)
}

func TestDensityBoundedKeepsMass(t *testing.T) {
	var d Density
	var total float64
	for i := range int64(3 * maxSegments) {
		n := int(i % 7)
		d.ObservePage(i*10, i*10+9, n)
		total += float64(n)
	}
	if len(d.pages) > maxSegments {
		t.Fatalf("%d segments kept", len(d.pages))
	}
	near(t, "total", d.Estimate(0, 3*maxSegments*10-1), total)
}

func TestDensityExtremesAreFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	edges := []int64{math.MinInt64, math.MinInt64 + 1, -1, 0, 1, math.MaxInt64 - 1, math.MaxInt64}
	for range 200 {
		var d Density
		for range 1 + rng.IntN(4) {
			a, b := edges[rng.IntN(len(edges))], edges[rng.IntN(len(edges))]
			a, b = min(a, b), max(a, b)
			if rng.IntN(2) == 0 {
				d.ObservePage(a, b, rng.IntN(1000))
			} else {
				d.ObserveCount(a, b, rng.Int64N(1000))
			}
		}
		for _, a := range edges {
			for _, b := range edges {
				if e := d.Estimate(a, b); math.IsNaN(e) || math.IsInf(e, 0) || e < 0 {
					t.Fatalf("Estimate(%d, %d) = %g", a, b, e)
				}
			}
		}
	}
}

func BenchmarkDensityEstimate(b *testing.B) {
	var d Density
	for i := range int64(maxSegments) {
		d.ObservePage(i*100, i*100+99, 500)
	}
	d.Estimate(0, 0) // build the view outside the timer
	rng := rand.New(rand.NewPCG(1, 1))
	for b.Loop() {
		lo := rng.Int64N(maxSegments * 100)
		d.Estimate(lo, lo+rng.Int64N(10000))
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "estimates/s")
}
