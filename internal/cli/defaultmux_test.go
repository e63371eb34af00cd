//go:build !lean

package cli

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestNothingOnDefaultServeMux: no package of the command registers a handler on
// http.DefaultServeMux (net/http/pprof's init does, with the process's profiles), so a
// server that ever serves that mux exposes nothing by accident. The test binary links
// every package the CLI does.
func TestNothingOnDefaultServeMux(t *testing.T) {
	for _, path := range []string{"/", "/debug/pprof/", "/debug/pprof/profile", "/debug/vars"} {
		if _, pattern := http.DefaultServeMux.Handler(httptest.NewRequest(http.MethodGet, path, nil)); pattern != "" {
			t.Errorf("http.DefaultServeMux serves %s (pattern %q)", path, pattern)
		}
	}
}
