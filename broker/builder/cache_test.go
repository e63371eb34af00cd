package builder

import (
	"context"
	"strings"
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

	// A third identical request is bound at once, from memory, to the same layer; one
	// for another package, or on another base, is left to a build.
	c, err := e.w.Classify(ctx, s, []string{"bar"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.ID, c.SessionID = "req_c", s.ID
	bc, ev, ok := e.w.BindNow(s, c)
	if !ok || bc.Digest != ra.Digest || bc.RequestID != "req_c" || bc.SessionID != s.ID || bc.Kind != broker.KindExt || ev.Action != "bound" || ev.RequestID != "req_c" {
		t.Fatalf("BindNow of a request whose layer is published: %+v %+v %v, want bound to %s", bc, ev, ok, ra.Digest)
	}
	other := s
	other.Base = "sha256:" + strings.Repeat("0", 64)
	if _, _, ok := e.w.BindNow(other, c); ok {
		t.Error("BindNow on another base: bound, want left to a build")
	}
	c.Upload = "bar-1.0-py3-none-any.whl"
	if _, _, ok := e.w.BindNow(s, c); ok {
		t.Error("BindNow of an upload: bound, want left to a build")
	}
	c.Upload, c.LockKey = "", "0000"
	if _, _, ok := e.w.BindNow(s, c); ok {
		t.Error("BindNow of an unknown lock: bound, want left to a build")
	}
}
