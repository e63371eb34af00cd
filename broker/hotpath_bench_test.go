package broker_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkAgentCalls is the server's own cost of the calls an agent makes on the hot path
// (bench/broker.sh's burst), without the network: its CPU and allocations per call.
func BenchmarkAgentCalls(b *testing.B) {
	e := newEnv(b, nil)
	call := func(b *testing.B, method, path, body string, want int) { // b: the (sub-)benchmark calling
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.agentA)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		if rec.Code != want {
			b.Fatalf("%s %s: %d %s, want %d", method, path, rec.Code, rec.Body, want)
		}
	}
	call(b, "POST", "/v1/sessions/"+e.sesA+"/requests", `{"packages": ["foo==1.0"]}`, http.StatusCreated)
	b.Run("env", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			call(b, "GET", "/v1/sessions/"+e.sesA+"/env", "", http.StatusOK)
		}
	})
	b.Run("request", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			call(b, "POST", "/v1/sessions/"+e.sesA+"/requests", `{"packages": ["foo==1.0"]}`, http.StatusCreated)
		}
	})
}
