package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
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
