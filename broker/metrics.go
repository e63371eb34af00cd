package broker

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// buckets of the latency histogram, in seconds.
var buckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// metrics is the Server's own Prometheus registry (not the global default one, so two
// Servers in one process count apart): HTTP requests and their latency, the Go runtime's
// and the process's metrics. Routes are patterns, never raw paths, so the label sets stay
// bounded.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pylayer_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pylayer_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern.",
			Buckets: buckets,
		}, []string{"route"}),
	}
	m.reg.MustRegister(m.requests, m.latency,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observe(route string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(route).Observe(d.Seconds())
}

// Descriptions of the metrics read at each scrape rather than kept in the registry.
var (
	requestsDesc = prometheus.NewDesc("pylayer_requests",
		"Package requests by state.", []string{"state"}, nil)
	longPollsDesc = prometheus.NewDesc("pylayer_long_polls_waiting",
		"Requests that long polls wait on now.", nil, nil)
	feedListeningDesc = prometheus.NewDesc("pylayer_change_feed_listening",
		"Whether this replica hears the other replicas' changes (1) or not (0).", nil, nil)
	feedChangesDesc = prometheus.NewDesc("pylayer_change_feed_notifications_total",
		"Request changes announced by any replica.", nil, nil)
)

// scrape is what one GET /metrics reads from the store and the server's state: the
// requests by state, the long polls, and the change feed if the store has one.
type scrape struct {
	byState map[State]int
	waiting int
	feed    *feedState
}

var _ prometheus.Collector = scrape{}

func (scrape) Describe(ch chan<- *prometheus.Desc) {
	ch <- requestsDesc
	ch <- longPollsDesc
	ch <- feedListeningDesc
	ch <- feedChangesDesc
}

func (c scrape) Collect(ch chan<- prometheus.Metric) {
	for _, st := range States {
		ch <- prometheus.MustNewConstMetric(requestsDesc, prometheus.GaugeValue, float64(c.byState[st]), string(st))
	}
	ch <- prometheus.MustNewConstMetric(longPollsDesc, prometheus.GaugeValue, float64(c.waiting))
	if !c.feed.present.Load() {
		return
	}
	up := 0.0
	if c.feed.listening.Load() {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(feedListeningDesc, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(feedChangesDesc, prometheus.CounterValue, float64(c.feed.changes.Load()))
}

// logFunc adapts a func to promhttp.Logger.
type logFunc func(v ...any)

func (f logFunc) Println(v ...any) { f(v...) }

// serveMetrics answers the Prometheus exposition of the server's registry and of one
// scrape. A store that cannot list requests fails it (500); a collector that fails is
// logged and left out, and the rest is served.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, _ Token) {
	ctx := r.Context()
	reqs, err := s.o.Store.ListRequests(ctx, RequestFilter{})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	sc := scrape{byState: map[State]int{}, waiting: s.waiters.watched(), feed: &s.feed}
	for _, q := range reqs {
		sc.byState[q.State]++
	}
	now := prometheus.NewRegistry()
	if err := now.Register(sc); err != nil {
		s.internal(w, r, fmt.Errorf("registering the scrape's metrics: %w", err))
		return
	}
	promhttp.HandlerFor(prometheus.Gatherers{s.metrics.reg, now}, promhttp.HandlerOpts{
		ErrorLog: logFunc(func(v ...any) {
			s.log.LogAttrs(ctx, slog.LevelError, "metrics: gathering", slog.String("error", fmt.Sprint(v...)))
		}),
		ErrorHandling:      promhttp.ContinueOnError,
		DisableCompression: true,
	}).ServeHTTP(w, r)
}
