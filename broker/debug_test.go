package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/sqlite"
)

func TestServeDebugRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "example.com:0", "no-port"} {
		if a, err := broker.ServeDebug(t.Context(), addr, broker.DebugOptions{}); err == nil {
			t.Errorf("ServeDebug(%q) listens on %s, want a refusal", addr, a)
		}
	}
	_, err := broker.ServeDebug(t.Context(), "0.0.0.0:0", broker.DebugOptions{})
	if !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("ServeDebug(0.0.0.0:0) = %v, want ErrInvalid", err)
	}
}

func TestServeDebugServesProfilesAndPool(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	a, err := broker.ServeDebug(ctx, "127.0.0.1:0", broker.DebugOptions{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) *http.Response {
		t.Helper()
		resp, err := http.Get("http://" + a.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	if r := get("/debug/pprof/goroutine?debug=1"); r.StatusCode != http.StatusOK {
		t.Errorf("goroutine profile: %s", r.Status)
	}
	// The CPU profile and the binary profiles are gzip'd protobufs, as go tool pprof reads them.
	for _, p := range []string{"/debug/pprof/profile?seconds=1", "/debug/pprof/heap", "/debug/pprof/mutex"} {
		r := get(p)
		b, err := io.ReadAll(r.Body)
		if err != nil || r.StatusCode != http.StatusOK || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("%s: %s, %d bytes, %v: want a gzip'd profile", p, r.Status, len(b), err)
		}
	}
	if r := get("/debug/pprof/trace?seconds=1"); r.StatusCode != http.StatusOK {
		t.Errorf("trace: %s", r.Status)
	}
	for p, want := range map[string]int{"/debug/pprof/nosuch": http.StatusNotFound, "/debug/pprof/profile?seconds=0": http.StatusBadRequest, "/debug/pprof/trace?seconds=x": http.StatusBadRequest} {
		if r := get(p); r.StatusCode != want {
			t.Errorf("%s: %s, want %d", p, r.Status, want)
		}
	}
	if r := get("/debug/pprof/"); r.StatusCode != http.StatusOK {
		t.Errorf("index: %s", r.Status)
	} else if b, _ := io.ReadAll(r.Body); !strings.Contains(string(b), "goroutine") {
		t.Errorf("index lists no goroutine profile: %q", b)
	}
	var pool map[string]float64
	r := get("/debug/pool")
	if err := json.NewDecoder(r.Body).Decode(&pool); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("/debug/pool: %s, %v", r.Status, err)
	}
	for _, k := range []string{"open", "in_use", "wait_count", "wait_duration_ms", "max_open"} {
		if _, ok := pool[k]; !ok {
			t.Errorf("/debug/pool has no %q: %v", k, pool)
		}
	}
	cancel()
}
