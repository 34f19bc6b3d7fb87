package lazyparse

import (
	"time"

	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the verify pool, registered on the registry the caller owns.
type Metrics struct {
	verdicts *prometheus.CounterVec
	batch    prometheus.Histogram
}

// NewMetrics registers the pool's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "archiver_verify_copies_total",
			Help: "Event copies judged by the verify pool, by verdict (valid or the invalid reason).",
		}, []string{"verdict"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "archiver_verify_batch_seconds",
			Help:    "Time to parse and verify one batch of queued copies.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
	}
	reg.MustRegister(m.verdicts, m.batch)
	return m
}

func (m *Metrics) observe(vs []rawstore.Verdict, d time.Duration) {
	for _, v := range vs {
		if v.Valid {
			m.verdicts.WithLabelValues("valid").Inc()
		} else if v.Reason != "" {
			m.verdicts.WithLabelValues(v.Reason).Inc()
		}
	}
	m.batch.Observe(d.Seconds())
}
