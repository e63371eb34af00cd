package broker

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The exposition is written here, in the Prometheus text format (0.0.4), not with
// prometheus/client_golang, for a measured reason: every pylayer command, `run` and
// `--version` included, is the one binary, and client_golang's package initialisation
// (its default registry's Go and process collectors, procfs, protobuf) cost 1.1-1.5 ms
// of every start (`pylayer --version` 3.9 -> 5.0-5.5 ms median, GODEBUG=inittrace=1:
// 0.57 ms in its prometheus package alone). What the broker exposes is small: two HTTP
// metrics, the requests by state, the long polls, the change feed, and the Go runtime's
// and the process's basics under client_golang's own names. metrics_test.go parses
// every scrape with prometheus/common's expfmt, the format's own parser.

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

// metrics are the Server's own (two Servers in one process count apart). Routes are
// patterns, never raw paths, so the label sets stay bounded.
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

// expo writes metric families in the text format.
type expo struct{ b bytes.Buffer }

func (e *expo) family(name, typ, help string) {
	fmt.Fprintf(&e.b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func (e *expo) sample(name, labels string, v float64) {
	if labels != "" {
		labels = "{" + labels + "}"
	}
	e.b.WriteString(name + labels + " " + strconv.FormatFloat(v, 'g', -1, 64) + "\n")
}

func label(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func (m *metrics) write(e *expo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e.family("pylayer_http_requests_total", "counter", "HTTP requests by route pattern and status code.")
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
		e.sample("pylayer_http_requests_total", fmt.Sprintf(`code="%d",route="%s"`, k.code, label(k.route)), float64(m.requests[k]))
	}
	e.family("pylayer_http_request_duration_seconds", "histogram", "HTTP request latency by route pattern.")
	routes := make([]string, 0, len(m.latency))
	for r := range m.latency {
		routes = append(routes, r)
	}
	sort.Strings(routes)
	for _, rt := range routes {
		h, l := m.latency[rt], label(rt)
		var cum uint64
		for i, le := range buckets {
			cum += h.counts[i]
			e.sample("pylayer_http_request_duration_seconds_bucket", fmt.Sprintf(`route="%s",le="%g"`, l, le), float64(cum))
		}
		e.sample("pylayer_http_request_duration_seconds_bucket", fmt.Sprintf(`route="%s",le="+Inf"`, l), float64(h.n))
		e.sample("pylayer_http_request_duration_seconds_sum", fmt.Sprintf(`route="%s"`, l), h.sum)
		e.sample("pylayer_http_request_duration_seconds_count", fmt.Sprintf(`route="%s"`, l), float64(h.n))
	}
}

// processStart is when this process started, for process_start_time_seconds.
var processStart = time.Now()

// writeRuntime writes the Go runtime's and the process's basics, under the names
// client_golang's collectors give them, so dashboards made for those work.
func writeRuntime(e *expo) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	for _, g := range []struct {
		name, typ, help string
		v               float64
	}{
		{"go_goroutines", "gauge", "Number of goroutines that currently exist.", float64(runtime.NumGoroutine())},
		{"go_threads", "gauge", "Number of OS threads created.", float64(threads())},
		{"go_memstats_alloc_bytes", "gauge", "Number of bytes allocated in heap and currently in use.", float64(ms.Alloc)},
		{"go_memstats_heap_alloc_bytes", "gauge", "Number of heap bytes allocated and currently in use.", float64(ms.HeapAlloc)},
		{"go_memstats_heap_inuse_bytes", "gauge", "Number of heap bytes that are in use.", float64(ms.HeapInuse)},
		{"go_memstats_sys_bytes", "gauge", "Number of bytes obtained from system.", float64(ms.Sys)},
		{"go_memstats_mallocs_total", "counter", "Total number of heap objects allocated.", float64(ms.Mallocs)},
		{"go_gc_cycles_total", "counter", "Number of completed GC cycles.", float64(ms.NumGC)},
		{"process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", float64(processStart.UnixNano()) / 1e9},
	} {
		e.family(g.name, g.typ, g.help)
		e.sample(g.name, "", g.v)
	}
	if rss, cpu, ok := procStat(); ok {
		e.family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.")
		e.sample("process_resident_memory_bytes", "", rss)
		e.family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.")
		e.sample("process_cpu_seconds_total", "", cpu)
	}
	if n, ok := openFDs(); ok {
		e.family("process_open_fds", "gauge", "Number of open file descriptors.")
		e.sample("process_open_fds", "", float64(n))
	}
}

func threads() int {
	n, _ := runtime.ThreadCreateProfile(nil)
	return n
}

// procStat reads this process's resident memory and CPU time from /proc/self/stat.
func procStat() (rss, cpu float64, ok bool) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')') // the command name may hold spaces and parentheses
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: state is field 3 of proc(5); utime 14, stime 15, rss 24.
	if len(f) < 22 {
		return 0, 0, false
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	pages, err3 := strconv.ParseFloat(f[21], 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, false
	}
	const ticks = 100 // USER_HZ, 100 on every Linux architecture Go supports
	return pages * float64(os.Getpagesize()), (utime + stime) / ticks, true
}

func openFDs() (int, bool) {
	d, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, false
	}
	return len(d), true
}

// serveMetrics answers the exposition: the HTTP metrics, what one scrape reads of the
// store and the server (requests by state, long polls, the change feed if the store has
// one), and the runtime's. A store that cannot list requests fails it (500).
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
	var e expo
	s.metrics.write(&e)
	e.family("pylayer_requests", "gauge", "Package requests by state.")
	for _, st := range States {
		e.sample("pylayer_requests", fmt.Sprintf(`state="%s"`, st), float64(byState[st]))
	}
	e.family("pylayer_long_polls_waiting", "gauge", "Requests that long polls wait on now.")
	e.sample("pylayer_long_polls_waiting", "", float64(s.waiters.watched()))
	if s.feed.present.Load() {
		up := 0.0
		if s.feed.listening.Load() {
			up = 1
		}
		e.family("pylayer_change_feed_listening", "gauge", "Whether this replica hears the other replicas' changes (1) or not (0).")
		e.sample("pylayer_change_feed_listening", "", up)
		e.family("pylayer_change_feed_notifications_total", "counter", "Request changes announced by any replica.")
		e.sample("pylayer_change_feed_notifications_total", "", float64(s.feed.changes.Load()))
	}
	writeRuntime(&e)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(e.b.Bytes())
}
