package broker

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// buckets of the latency histogram, in seconds.
var buckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

type routeCode struct {
	route string
	code  int
}

type histogram struct {
	counts []uint64 // per bucket, not cumulative
	sum    float64
	n      uint64
}

// metrics are kept by hand in the Prometheus text format; routes are patterns, so the
// label sets stay bounded.
type metrics struct {
	mu       sync.Mutex
	requests map[routeCode]uint64
	latency  map[string]*histogram
}

func newMetrics() *metrics {
	return &metrics{requests: map[routeCode]uint64{}, latency: map[string]*histogram{}}
}

func (m *metrics) observe(route string, code int, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[routeCode{route, code}]++
	h := m.latency[route]
	if h == nil {
		h = &histogram{counts: make([]uint64, len(buckets))}
		m.latency[route] = h
	}
	sec := d.Seconds()
	for i, b := range buckets {
		if sec <= b {
			h.counts[i]++
			break
		}
	}
	h.sum += sec
	h.n++
}

func label(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, _ Token) {
	reqs, err := s.o.Store.ListRequests(r.Context(), RequestFilter{})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	byState := map[State]int{}
	for _, q := range reqs {
		byState[q.State]++
	}
	var b strings.Builder
	m := s.metrics
	m.mu.Lock()
	b.WriteString("# HELP pylayer_http_requests_total HTTP requests by route pattern and status code.\n")
	b.WriteString("# TYPE pylayer_http_requests_total counter\n")
	keys := make([]routeCode, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].route != keys[j].route {
			return keys[i].route < keys[j].route
		}
		return keys[i].code < keys[j].code
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "pylayer_http_requests_total{route=\"%s\",code=\"%d\"} %d\n", label(k.route), k.code, m.requests[k])
	}
	b.WriteString("# HELP pylayer_http_request_duration_seconds HTTP request latency by route pattern.\n")
	b.WriteString("# TYPE pylayer_http_request_duration_seconds histogram\n")
	routes := make([]string, 0, len(m.latency))
	for r := range m.latency {
		routes = append(routes, r)
	}
	sort.Strings(routes)
	for _, rt := range routes {
		h := m.latency[rt]
		var cum uint64
		for i, le := range buckets {
			cum += h.counts[i]
			fmt.Fprintf(&b, "pylayer_http_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %d\n", label(rt), le, cum)
		}
		fmt.Fprintf(&b, "pylayer_http_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %d\n", label(rt), h.n)
		fmt.Fprintf(&b, "pylayer_http_request_duration_seconds_sum{route=\"%s\"} %g\n", label(rt), h.sum)
		fmt.Fprintf(&b, "pylayer_http_request_duration_seconds_count{route=\"%s\"} %d\n", label(rt), h.n)
	}
	m.mu.Unlock()
	b.WriteString("# HELP pylayer_requests Package requests by state.\n")
	b.WriteString("# TYPE pylayer_requests gauge\n")
	for _, st := range States {
		fmt.Fprintf(&b, "pylayer_requests{state=\"%s\"} %d\n", st, byState[st])
	}
	b.WriteString("# HELP pylayer_long_polls_waiting Requests that long polls wait on now.\n")
	b.WriteString("# TYPE pylayer_long_polls_waiting gauge\n")
	fmt.Fprintf(&b, "pylayer_long_polls_waiting %d\n", s.waiters.watched())
	s.feed.metrics(&b)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}
