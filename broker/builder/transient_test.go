package builder

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/catalog"
	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/test/fixture"
)

// flaky is an index that can fail with 503 or hold every request until released.
type flaky struct {
	h       http.Handler
	down    atomic.Bool
	hold    chan struct{} // nil: no holding
	arrived chan struct{} // gets a value when a held request arrives
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.down.Load() {
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
		return
	}
	if f.hold != nil {
		select {
		case f.arrived <- struct{}{}:
		default:
		}
		select {
		case <-f.hold:
		case <-r.Context().Done():
			return
		}
	}
	f.h.ServeHTTP(w, r)
}

// flakyIndex points e's worker at a copy of the fixture index behind f.
func flakyIndex(t *testing.T, e *env, f *flaky) {
	t.Helper()
	dir := t.TempDir()
	for _, w := range []fixture.Wheel{{Name: "foo", Version: "1.0"}, {Name: "bar", Version: "1.0", RequiresDist: []string{"foo"}}} {
		if _, err := w.Write(dir); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := index.NewServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	f.h = srv
	hs := httptest.NewServer(f)
	t.Cleanup(hs.Close)
	idx, err := index.New(hs.URL+"/simple/", index.WithNetrc(""))
	if err != nil {
		t.Fatal(err)
	}
	e.w.cfg.Index, e.w.cfg.Trees.Fetcher = idx, idx
}

// TestClassifyTransient: an index that answers 503, or refuses connections, makes
// Classify fail with ErrUnavailable (no rejection), and the failure is not kept: the
// same request classifies once the index is back.
func TestClassifyTransient(t *testing.T) {
	ctx := context.Background()
	e, s := setup(t, catalog.Default())
	f := &flaky{}
	flakyIndex(t, e, f)
	f.down.Store(true)
	r, err := e.w.Classify(ctx, s, []string{"bar"}, nil)
	if !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("index down: Classify = %+v, %v; want ErrUnavailable", r, err)
	}
	f.down.Store(false)
	r, err = e.w.Classify(ctx, s, []string{"bar"}, nil)
	if err != nil || r.State != broker.StatePending {
		t.Fatalf("index back: Classify = %s, %v; want pending (the failure must not be cached)", r.State, err)
	}
	e.settle(t, r) // nothing reads the index being replaced below

	// Connection refused: an index on a port nobody listens on.
	hs := httptest.NewServer(http.NotFoundHandler())
	url := hs.URL
	hs.Close()
	idx, err := index.New(url+"/simple/", index.WithNetrc(""))
	if err != nil {
		t.Fatal(err)
	}
	e.w.cfg.Index, e.w.cfg.Trees.Fetcher = idx, idx
	if r, err := e.w.Classify(ctx, s, []string{"baz"}, nil); !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("connection refused: Classify = %+v, %v; want ErrUnavailable", r, err)
	}
}

// TestClassifyOutcomes: what the index says about the request is a decision, stored
// as a rejection like before.
func TestClassifyOutcomes(t *testing.T) {
	e, s := setup(t, catalog.Default())
	for _, spec := range []string{"no-such-project", "foo==9.9"} {
		r, err := e.w.Classify(context.Background(), s, []string{spec}, nil)
		if err != nil || r.State != broker.StateRejected {
			t.Errorf("%s: Classify = %s %v, %v; want rejected", spec, r.State, r.Reasons, err)
		}
	}
}

// TestClassifySharedContext: the first caller of a shared classification leaving (its
// context cancelled) fails only that caller; the one that joined gets the result.
func TestClassifySharedContext(t *testing.T) {
	e, s := setup(t, catalog.Default())
	f := &flaky{hold: make(chan struct{}), arrived: make(chan struct{}, 1)}
	flakyIndex(t, e, f)
	first, cancel := context.WithCancel(context.Background())
	firstErr := make(chan error, 1)
	go func() {
		_, err := e.w.Classify(first, s, []string{"bar"}, nil)
		firstErr <- err
	}()
	<-f.arrived // the shared resolution is at the index
	second := make(chan error, 1)
	var got broker.Request
	go func() {
		var err error
		got, err = e.w.Classify(context.Background(), s, []string{"bar"}, nil)
		second <- err
	}()
	cancel()
	if err := <-firstErr; !errors.Is(err, broker.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled caller: err = %v, want ErrUnavailable wrapping context.Canceled", err)
	}
	close(f.hold)
	if err := <-second; err != nil {
		t.Fatalf("the caller that stayed: %v (the first caller's cancel reached the shared work)", err)
	}
	if got.State != broker.StatePending || !strings.Contains(strings.Join(pkgNames(got), ","), "bar") {
		t.Errorf("the caller that stayed: %+v", got)
	}
}

func pkgNames(r broker.Request) []string {
	var out []string
	for _, p := range r.Packages {
		out = append(out, p.Name)
	}
	return out
}
