package broker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pylayer/pylayer/broker"
)

// scrape GETs /metrics from h and parses it with expfmt, failing on anything that is not
// a valid text exposition.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := tryScrape(h)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// tryScrape is scrape for any goroutine. It asks for gzip, which the broker must not use.
func tryScrape(h http.Handler) (map[string]*dto.MetricFamily, error) {
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		return nil, fmt.Errorf("GET /metrics: Content-Type %q, want the text format 0.0.4", ct)
	}
	if ce := rec.Header().Get("Content-Encoding"); ce != "" {
		return nil, fmt.Errorf("GET /metrics: Content-Encoding %q, want none", ce)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		return nil, fmt.Errorf("the exposition does not parse: %w", err)
	}
	return mfs, nil
}

// sample is the value of the metric in mfs named name with exactly the labels given
// (name, value pairs), or NaN if there is none. For a histogram it is the count.
func sample(mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	mf := mfs[name]
	if mf == nil {
		return math.NaN()
	}
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel())*2 != len(labels) {
			continue
		}
		match := true
		for i := 0; i < len(labels); i += 2 {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
			}) {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			return m.Untyped.GetValue()
		}
	}
	return math.NaN()
}

// TestMetricsExposition: the exposition parses; it counts requests by route pattern and
// code (never by raw path), times them in the fixed buckets, gives requests by state,
// and carries the Go runtime's and the process's metrics.
func TestMetricsExposition(t *testing.T) {
	e := newEnv(t, nil)
	for range 3 {
		e.mustDo("GET", "/healthz", "", "", "", http.StatusOK, nil)
	}
	e.mustDo("POST", "/v1/sessions/"+e.sesA+"/requests", e.agentA, "application/json", `{"packages":["pend-a"]}`, http.StatusCreated, nil)
	e.mustDo("POST", "/v1/sessions/"+e.sesA+"/requests", e.agentA, "application/json", `{"packages":["deny-b"]}`, http.StatusCreated, nil)
	e.do("GET", "/no/such/path-4f1c", "", "", "")
	e.do("GET", "/v1/requests/not-an-id-9e2d", e.alice, "", "")

	mfs := scrape(t, e.srv)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"pylayer_http_requests_total", []string{"route", "GET /healthz", "code", "200"}, 3},
		{"pylayer_http_requests_total", []string{"route", "POST /v1/sessions/{id}/requests", "code", "201"}, 2},
		{"pylayer_http_requests_total", []string{"route", "unmatched", "code", "404"}, 1},
		{"pylayer_http_requests_total", []string{"route", "GET /v1/requests/{id}", "code", "404"}, 1},
		{"pylayer_http_request_duration_seconds", []string{"route", "GET /healthz"}, 3},
		{"pylayer_requests", []string{"state", "pending"}, 1},
		{"pylayer_requests", []string{"state", "rejected"}, 1},
		{"pylayer_requests", []string{"state", "built"}, 0},
		{"pylayer_long_polls_waiting", nil, 0},
	} {
		if got := sample(mfs, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, st := range broker.States {
		if math.IsNaN(sample(mfs, "pylayer_requests", "state", string(st))) {
			t.Errorf("pylayer_requests lacks state %s", st)
		}
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "4f1c") || strings.Contains(l.GetValue(), "9e2d") {
					t.Errorf("%s has a raw path in label %s=%q", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
	if mf := mfs["pylayer_http_request_duration_seconds"]; mf.GetType() != dto.MetricType_HISTOGRAM {
		t.Errorf("pylayer_http_request_duration_seconds is a %v", mf.GetType())
	} else {
		var les []float64
		for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
			les = append(les, b.GetUpperBound())
		}
		want := []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, math.Inf(1)}
		if !slices.Equal(les, want) {
			t.Errorf("latency buckets %v, want %v", les, want)
		}
	}
	for name, typ := range map[string]dto.MetricType{
		"pylayer_http_requests_total": dto.MetricType_COUNTER, "pylayer_requests": dto.MetricType_GAUGE,
		"pylayer_long_polls_waiting": dto.MetricType_GAUGE,
	} {
		if got := mfs[name].GetType(); got != typ {
			t.Errorf("%s is a %v, want a %v", name, got, typ)
		}
	}
	// The Go runtime and the process.
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes", "process_start_time_seconds"} {
		if got := sample(mfs, name); !(got > 0) {
			t.Errorf("%s = %v, want > 0", name, got)
		}
	}
	// SQLite has no change feed: no metrics of one.
	if _, ok := mfs["pylayer_change_feed_listening"]; ok {
		t.Error("pylayer_change_feed_listening without a change feed")
	}
}

// TestMetricsOwnRegistry: each Server counts its own requests, in a registry of its own.
func TestMetricsOwnRegistry(t *testing.T) {
	e := newEnv(t, nil)
	other, err := broker.NewServer(broker.Options{Store: e.store, Classifier: fakeClassifier{}})
	if err != nil {
		t.Fatal(err)
	}
	e.mustDo("GET", "/healthz", "", "", "", http.StatusOK, nil)
	if got := sample(scrape(t, e.srv), "pylayer_http_requests_total", "route", "GET /healthz", "code", "200"); got != 1 {
		t.Errorf("the server's own count is %v, want 1", got)
	}
	mfs := scrape(t, other)
	if got := sample(mfs, "pylayer_http_requests_total", "route", "GET /healthz", "code", "200"); !math.IsNaN(got) {
		t.Errorf("another server counts the first one's requests: %v", got)
	}
	// Its own scrape of /metrics is counted after it is answered.
	if got := sample(scrape(t, other), "pylayer_http_requests_total", "route", "GET /metrics", "code", "200"); got != 1 {
		t.Errorf("the other server's /metrics count is %v, want 1", got)
	}
}

// feedStore is a store with a change feed that listens at once, announces two changes,
// and then says it is done.
type feedStore struct {
	broker.Store
	announced chan struct{}
}

func (f feedStore) Follow(ctx context.Context, changed func(broker.Change), status func(error)) error {
	status(nil)
	changed(broker.Change{RequestID: "r1"})
	changed(broker.Change{})
	close(f.announced)
	<-ctx.Done()
	return ctx.Err()
}

// TestMetricsChangeFeed: a store with a change feed adds whether it listens and how many
// changes it announced.
func TestMetricsChangeFeed(t *testing.T) {
	announced := make(chan struct{})
	e := newEnv(t, func(o *broker.Options) { o.Store = feedStore{o.Store, announced} })
	if _, ok := scrape(t, e.srv)["pylayer_change_feed_listening"]; ok {
		t.Error("pylayer_change_feed_listening before Serve follows the feed")
	}
	e.serve(t)
	<-announced
	mfs := scrape(t, e.srv)
	if got := sample(mfs, "pylayer_change_feed_listening"); got != 1 {
		t.Errorf("pylayer_change_feed_listening = %v, want 1", got)
	}
	if got := sample(mfs, "pylayer_change_feed_notifications_total"); got != 2 {
		t.Errorf("pylayer_change_feed_notifications_total = %v, want 2", got)
	}
	if got := mfs["pylayer_change_feed_notifications_total"].GetType(); got != dto.MetricType_COUNTER {
		t.Errorf("pylayer_change_feed_notifications_total is a %v", got)
	}
}

// listFailStore cannot list requests, as a store whose disk went away.
type listFailStore struct{ broker.Store }

func (listFailStore) ListRequests(context.Context, broker.RequestFilter) ([]broker.Request, error) {
	return nil, errors.New("disk I/O error reading /var/lib/pylayer/broker.db")
}

// TestMetricsStoreDown: a store that cannot list requests makes /metrics a 500 with the
// house error and the cause in the log, not in the response.
func TestMetricsStoreDown(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.Store = listFailStore{o.Store} })
	code, _, body := e.do("GET", "/metrics", "", "", "")
	if code != http.StatusInternalServerError || strings.Contains(string(body), "/var/lib") || !strings.Contains(string(body), "internal error") {
		t.Errorf("GET /metrics with the store down: %d %s", code, body)
	}
	if !strings.Contains(e.logs.String(), "disk I/O error") {
		t.Error("the log lacks the cause")
	}
}

// TestMetricsConcurrent scrapes while requests are served (for -race), and every scrape
// parses.
func TestMetricsConcurrent(t *testing.T) {
	e := newEnv(t, nil)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				resp, err := e.ts.Client().Get(e.ts.URL + "/healthz")
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		wg.Go(func() {
			for range 5 {
				if _, err := tryScrape(e.srv); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := sample(scrape(t, e.srv), "pylayer_http_requests_total", "route", "GET /healthz", "code", "200"); got != 40 {
		t.Errorf("GET /healthz counted %v times, want 40", got)
	}
}

// BenchmarkMetrics is one scrape of a server with a few routes counted.
func BenchmarkMetrics(b *testing.B) {
	e := newEnv(b, nil)
	for range 3 {
		e.do("GET", "/healthz", "", "", "")
	}
	req := httptest.NewRequest("GET", "/metrics", nil)
	for b.Loop() {
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}
