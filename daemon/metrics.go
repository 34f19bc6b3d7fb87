package daemon

import (
	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the daemon itself and of the archive.
type metrics struct {
	writeStalls prometheus.Counter
	diskSlow    prometheus.Counter
	diskPaused  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		writeStalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "archiver_pebble_write_stalls_total", Help: "Pebble write stalls (ingest outran compaction).",
		}),
		diskSlow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "archiver_pebble_disk_slow_total", Help: "Pebble disk operations reported slow.",
		}),
		diskPaused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "archiver_disk_paused", Help: "1 while crawling is paused because free disk space is under the floor.",
		}),
	}
	reg.MustRegister(m.writeStalls, m.diskSlow, m.diskPaused)
	return m
}

// registerStore exports the archive's counters and Pebble's health, read
// at scrape time.
func (m *metrics) registerStore(reg prometheus.Registerer, store *rawstore.Store) {
	stat := func(name, help string, pick func(rawstore.Stats) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			st, err := store.Stats()
			if err != nil {
				return -1
			}
			return float64(pick(st))
		})
	}
	db := store.DB()
	reg.MustRegister(
		stat("archiver_events", "Unique event ids stored.", func(s rawstore.Stats) int64 { return s.Events }),
		stat("archiver_events_valid", "Ids whose stored copy verified.", func(s rawstore.Stats) int64 { return s.Valid }),
		stat("archiver_events_invalid", "Ids whose stored copy failed verification.", func(s rawstore.Stats) int64 { return s.Invalid }),
		stat("archiver_verify_backlog", "Ids waiting for verification.", func(s rawstore.Stats) int64 { return s.Pending }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "archiver_pebble_compaction_debt_bytes", Help: "Pebble's estimate of bytes to compact to reach a stable LSM shape.",
		}, func() float64 { return float64(db.Metrics().Compact.EstimatedDebt) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "archiver_pebble_disk_usage_bytes", Help: "Bytes the archive uses on disk.",
		}, func() float64 { return float64(db.Metrics().DiskSpaceUsage()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "archiver_pebble_l0_files", Help: "Files in Pebble's L0 (many means ingest outruns compaction).",
		}, func() float64 { return float64(db.Metrics().Levels[0].TablesCount) }),
	)
}
