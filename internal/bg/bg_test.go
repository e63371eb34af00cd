package bg

import (
	"context"
	"testing"
)

// TestGroup: work runs under the group's context; Close cancels it and waits for it;
// nothing starts after Close.
func TestGroup(t *testing.T) {
	g := New(context.Background(), false)
	started := make(chan struct{})
	stopped := false
	if !g.Go(func(ctx context.Context) { close(started); <-ctx.Done(); stopped = true }) {
		t.Fatal("Go on an open group did not start the work")
	}
	<-started
	g.Close(true)
	if !stopped {
		t.Error("Close returned before the work it cancelled ended")
	}
	if g.Go(func(context.Context) { t.Error("work ran after Close") }) {
		t.Error("Go after Close reported the work started")
	}
	g.Close(true) // again: a no-op
}

// TestGroupDetached: a detached group outlives its parent's cancellation; Close without
// cancel lets the work finish.
func TestGroupDetached(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	g := New(parent, true)
	cancel()
	done := make(chan struct{})
	release := make(chan struct{})
	if !g.Go(func(ctx context.Context) {
		select {
		case <-ctx.Done():
			t.Error("the parent's cancellation reached a detached group")
		case <-release:
		}
		close(done)
	}) {
		t.Fatal("Go did not start")
	}
	close(release)
	g.Close(false)
	<-done
}
