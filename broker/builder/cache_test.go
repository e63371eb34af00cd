package builder

import (
	"context"
	"sync"
	"testing"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/catalog"
)

// TestHotPathWithoutIndex: once a layer was classified and published here, an identical
// request is classified (shared), built from the classification's lock and bound to the
// published tag while the index answers nothing but 503: no index or repository round
// trip on the hot path.
func TestHotPathWithoutIndex(t *testing.T) {
	e, s := setup(t, &catalog.Catalog{Allow: []catalog.Rule{{Name: "bar"}, {Name: "foo"}}})
	f := &flaky{}
	flakyIndex(t, e, f)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.w.Run(ctx, 2) }()
	defer wg.Wait()
	defer cancel()

	a := e.request(t, s, "req_a", "bar")
	e.w.Enqueue(ctx, a.ID)
	ra := e.waitTerminal(t, a.ID)
	if ra.State != broker.StateBound {
		t.Fatalf("first request: %s %s, want bound", ra.State, ra.Error)
	}
	f.down.Store(true)
	b := e.request(t, s, "req_b", "bar")
	if b.State != broker.StateApproved {
		t.Fatalf("second request with the index down: %s, want approved from the shared classification", b.State)
	}
	e.w.Enqueue(ctx, b.ID)
	rb := e.waitTerminal(t, b.ID)
	if rb.State != broker.StateBound || rb.Digest != ra.Digest {
		t.Fatalf("second request with the index down: %s %q %s, want bound to %s", rb.State, rb.Digest, rb.Error, ra.Digest)
	}
	if got, want := [2]int64{e.w.Builds(), e.w.Binds()}, [2]int64{1, 1}; got != want {
		t.Errorf("builds, binds = %v, want %v", got, want)
	}
}
