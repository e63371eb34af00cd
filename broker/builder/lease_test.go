package builder

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/catalog"
	"github.com/pylayer/pylayer/layers/build"
)

// TestReplicasBuildOnce: two workers (two replicas) on one store, identical requests in
// many sessions: every request is bound to the same layer, which is built once.
func TestReplicasBuildOnce(t *testing.T) {
	e, s := setup(t, &catalog.Catalog{Allow: []catalog.Rule{{Name: "bar"}, {Name: "foo"}}})
	ctx := context.Background()
	cfg2 := e.w.cfg
	cfg2.Holder = ""
	cfg2.Trees = &build.Builder{Root: t.TempDir(), Fetcher: e.idx} // its own host cache
	w2, err := New(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	if w2.Holder() == e.w.Holder() {
		t.Fatalf("two workers share the holder name %s", w2.Holder())
	}
	var ids []string
	for i := range 6 {
		se := s
		se.ID = fmt.Sprintf("ses_%d", i)
		if err := e.store.CreateSession(ctx, se); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.request(t, se, fmt.Sprintf("req_%d", i), "bar").ID)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	for _, w := range []*Worker{e.w, w2} {
		go func() { w.Run(rctx, 3); done <- struct{}{} }()
	}
	digests := map[string]int{}
	for _, id := range ids {
		r := e.waitTerminal(t, id)
		if r.State != broker.StateBound {
			t.Fatalf("%s: %s (%s)", id, r.State, r.Error)
		}
		digests[r.Digest]++
	}
	cancel()
	<-done
	<-done
	if len(digests) != 1 {
		t.Errorf("identical requests bound to %d layers: %v", len(digests), digests)
	}
	if b := e.w.Builds() + w2.Builds(); b != 1 {
		t.Errorf("the layer was built %d times across the replicas (%d + %d), want once", b, e.w.Builds(), w2.Builds())
	}
}

// TestHoldLosesLease: the heartbeat renews every quarter lease and cancels the build, with
// errLeaseLost as the cause, once the store says the lease is another worker's.
func TestHoldLosesLease(t *testing.T) {
	e, _ := setup(t, nil)
	w := e.w
	w.cfg.Lease = 40 * time.Millisecond
	var calls atomic.Int32
	ctx, stop := w.hold(context.Background(), func(context.Context) error {
		if calls.Add(1) < 3 {
			return nil
		}
		return fmt.Errorf("lease: %w", broker.ErrConflict)
	})
	defer stop()
	select {
	case <-ctx.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the build was not cancelled after its lease was lost")
	}
	if !errors.Is(context.Cause(ctx), errLeaseLost) || calls.Load() != 3 {
		t.Errorf("cause %v after %d renewals, want errLeaseLost after 3", context.Cause(ctx), calls.Load())
	}
}

// TestCrowdBoundAtOnce: many sessions asking for one layer while it is built are bound,
// each once, with its binding and "bound" event, and all but the few requests workers had
// claimed are bound together when the layer lands (Store.BindApproved), not one by one.
func TestCrowdBoundAtOnce(t *testing.T) {
	e, s := setup(t, &catalog.Catalog{Allow: []catalog.Rule{{Name: "bar"}, {Name: "foo"}}})
	ctx := context.Background()
	const n = 40
	var ids []string
	for i := range n {
		se := s
		se.ID = fmt.Sprintf("ses_%d", i)
		if err := e.store.CreateSession(ctx, se); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.request(t, se, fmt.Sprintf("req_%02d", i), "bar").ID)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { e.w.Run(rctx, 1); close(done) }()
	defer func() { cancel(); <-done }()
	digests := map[string]bool{}
	for _, id := range ids {
		r := e.waitTerminal(t, id)
		if r.State != broker.StateBound {
			t.Fatalf("%s: %s (%s)", id, r.State, r.Error)
		}
		digests[r.Digest] = true
	}
	if len(digests) != 1 || e.w.Builds() != 1 {
		t.Errorf("%d requests bound to %d layers, built %d times; want one layer built once", n, len(digests), e.w.Builds())
	}
	together := 0
	for i, id := range ids {
		se := fmt.Sprintf("ses_%d", i)
		bs, err := e.store.Bindings(ctx, se)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 1 || bs[0].RequestID != id {
			t.Errorf("%s: bindings %+v, want one of %s", se, bs, id)
		}
		l, err := e.store.AuditLog(ctx, se)
		if err != nil {
			t.Fatal(err)
		}
		bound := 0
		for _, ev := range l {
			if ev.Action == "bound" {
				bound++
				if strings.HasSuffix(ev.Detail, "(published: bound without a build)") {
					together++
				}
			}
		}
		if bound != 1 {
			t.Errorf("%s: %d bound events, want 1: %+v", id, bound, l)
		}
	}
	if together < n-claimers {
		t.Errorf("%d of %d requests bound together when the layer landed, want at least %d (all but the claimed)", together, n, n-claimers)
	}
}

// TestLayerLeaseWakesOnEnd: a worker waiting for another replica's lease on a layer
// tries again when the change feed reports a request ended (RequestEnded), not at its
// next poll, which is an hour away here; an end while the lease is still held sends it
// back to waiting.
func TestLayerLeaseWakesOnEnd(t *testing.T) {
	defer func(d time.Duration) { layerLeaseWait = d }(layerLeaseWait)
	layerLeaseWait = time.Hour
	e, _ := setup(t, nil)
	ctx := context.Background()
	other := broker.Lease{Holder: "other-replica", TTL: time.Hour}
	if ok, err := e.store.AcquireLease(ctx, "layer:t", other); err != nil || !ok {
		t.Fatalf("the other replica's lease: %v %v", ok, err)
	}
	done := make(chan error, 1)
	go func() { done <- e.w.awaitLease(ctx, "layer:t") }()
	tries := func(n int64) {
		t.Helper()
		for e.w.leaseTries.Load() < n {
			select {
			case err := <-done:
				t.Fatalf("awaitLease returned %v while the other replica held the lease", err)
			case <-time.After(time.Millisecond):
			}
		}
	}
	tries(1)
	e.w.RequestEnded() // the lease is still held: it tries, fails and waits again
	tries(2)
	if err := e.store.ReleaseLease(ctx, "layer:t", other.Holder); err != nil {
		t.Fatal(err)
	}
	e.w.RequestEnded()
	if err := <-done; err != nil {
		t.Fatalf("awaitLease: %v", err)
	}
	if ok, err := e.store.AcquireLease(ctx, "layer:t", other); err != nil || ok {
		t.Errorf("after awaitLease the other replica took the lease again (%v, %v): want it this worker's", ok, err)
	}
}
