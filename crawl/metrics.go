package crawl

import (
	"github.com/nostr-archiver/archiver/relayconn"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the crawl, per relay, registered on the caller's registry.
type Metrics struct {
	events     *prometheus.CounterVec
	bytes      *prometheus.CounterVec
	pages      *prometheus.CounterVec
	refusals   *prometheus.CounterVec
	inflight   *prometheus.GaugeVec
	conns      *prometheus.GaugeVec
	target     *prometheus.GaugeVec
	finished   *prometheus.CounterVec
	pageSecond prometheus.Histogram
	keep       func(url string) bool // nil: every relay its own series
}

// NewMetrics registers the crawl's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	relay := []string{"relay"}
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "archiver_crawl_events_total", Help: "EVENT copies received, per relay.",
		}, relay),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "archiver_crawl_bytes_total", Help: "Bytes of EVENT frames received, per relay.",
		}, relay),
		pages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "archiver_crawl_pages_total", Help: "REQ pages answered, per relay.",
		}, relay),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "archiver_crawl_refusals_total", Help: "Pages refused or failed, per relay and kind (rate-limited, notice, timeout, conn-lost, closed:<prefix>, http-429, dial-error).",
		}, []string{"relay", "kind"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "archiver_crawl_inflight_reqs", Help: "REQs in flight, per relay.",
		}, relay),
		conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "archiver_crawl_connections", Help: "Open connections, per relay.",
		}, relay),
		target: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "archiver_crawl_controller_target", Help: "The concurrency controller's target, per relay: dim=conns or inflight_per_conn.",
		}, []string{"relay", "dim"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "archiver_crawl_finished_total", Help: "Crawls of a relay that ended, by finish reason.",
		}, []string{"relay", "finish"}),
		pageSecond: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "archiver_crawl_page_seconds", Help: "Time from REQ to the end of its page.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
	}
	reg.MustRegister(m.events, m.bytes, m.pages, m.refusals, m.inflight, m.conns, m.target, m.finished, m.pageSecond)
	return m
}

// relayMetrics are one relay's children of Metrics.
type relayMetrics struct {
	events, bytes, pages prometheus.Counter
	inflight, conns      prometheus.Gauge
	targetConns          prometheus.Gauge
	targetInflight       prometheus.Gauge
	m                    *Metrics
	relay                string
}

// OtherRelays is the relay label of the relays Metrics.Keep leaves out.
const OtherRelays = "other"

// KeepRelays limits the per-relay series to the relays keep admits; the
// others share the label OtherRelays, so that a daemon over thousands of
// relays exports a bounded number of series. Call it before crawling.
func (m *Metrics) KeepRelays(keep func(url string) bool) { m.keep = keep }

func (m *Metrics) forRelay(url string) *relayMetrics {
	if m.keep != nil && !m.keep(url) {
		url = OtherRelays
	}
	return &relayMetrics{
		events: m.events.WithLabelValues(url), bytes: m.bytes.WithLabelValues(url), pages: m.pages.WithLabelValues(url),
		inflight: m.inflight.WithLabelValues(url), conns: m.conns.WithLabelValues(url),
		targetConns: m.target.WithLabelValues(url, "conns"), targetInflight: m.target.WithLabelValues(url, "inflight_per_conn"),
		m: m, relay: url,
	}
}

func (rm *relayMetrics) refusal(kind string) { rm.m.refusals.WithLabelValues(rm.relay, kind).Inc() }

func (rm *relayMetrics) finish(reason string) { rm.m.finished.WithLabelValues(rm.relay, reason).Inc() }

func (rm *relayMetrics) page(p *relayconn.Page) {
	rm.pages.Inc()
	rm.events.Add(float64(len(p.Items)))
	rm.bytes.Add(float64(p.Bytes))
	rm.m.pageSecond.Observe(p.Latency.Seconds())
}
