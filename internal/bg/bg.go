// Package bg runs a component's background work, which outlives the calls that start it
// and which the component's owner waits for when it closes it: the broker's
// classifications of asynchronous requests and the builder's publishes ahead of builds.
// A sync.WaitGroup alone does not do it: a Go after Close began must not start (Add
// racing Wait), and the work wants the group's context, cancelled or not, to stop on.
package bg

import (
	"context"
	"sync"
)

// Group is background work under one context. The zero Group is not usable; see New.
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// New returns a Group whose work runs under a context derived from parent (without
// parent's cancellation when detached), cancelled by Close.
func New(parent context.Context, detached bool) *Group {
	if detached {
		parent = context.WithoutCancel(parent)
	}
	ctx, cancel := context.WithCancel(parent)
	return &Group{ctx: ctx, cancel: cancel}
}

// Go runs fn in a goroutine with the group's context, unless the group is closing; it
// reports whether fn was started.
func (g *Group) Go(fn func(ctx context.Context)) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.ctx.Err() != nil {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		fn(g.ctx)
	}()
	return true
}

// Close stops new work, cancels the group's context when cancel is set (else lets the
// work finish), and waits for the work under way. It may be called more than once.
func (g *Group) Close(cancel bool) {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	if cancel {
		g.cancel()
	}
	g.wg.Wait()
	g.cancel()
}
