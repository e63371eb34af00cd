package build

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/pylayer/pylayer/layers/lock"
)

// Trees installs every package of l (in parallel) and returns their trees in lock order.
func (b *Builder) Trees(ctx context.Context, l *lock.Lock) ([]Tree, error) {
	_, id, err := b.installOptions(ctx, l.Target.Python)
	if err != nil {
		return nil, err
	}
	if err := b.EachTree(ctx, l, func(context.Context, int, Tree) error { return nil }); err != nil {
		return nil, err
	}
	out := make([]Tree, len(l.Packages))
	for i, p := range l.Packages {
		out[i] = b.treeOf(p, id)
	}
	return out, nil
}

// downloads bounds the wheels one EachTree fetches at a time.
const downloads = 8

// EachTree installs every package of l, as Trees does, and calls fn with each tree and
// its index in l.Packages as soon as that tree is ready, while the others install: fn
// runs in the worker that made the tree (so fn must be safe for concurrent use) and its
// work counts against Options.Jobs like an install's. The first error, of an install or
// of fn, cancels the rest and is returned.
//
// A tree that was just installed is handed to fn while it is being flushed to disk, in
// its temporary directory (t.Dir); once both are done EachTree renames it into place.
// So fn may read t.Dir only until it returns.
//
// The wheels missing from the wheelhouse are all fetched at once (a few at a time);
// trees are installed Jobs at a time, the biggest wheel that is at hand first, so that
// the longest jobs do not come last; their .pyc are compiled by one wheel.Compiler that
// they share, started by CompiledBy or as the fetches begin. Each tree's native
// libraries are checked against the lock's target platform while fn works on it (see
// Options.NativeMissing).
func (b *Builder) EachTree(ctx context.Context, l *lock.Lock, fn func(ctx context.Context, i int, t Tree) error) error {
	jobs := b.Options.Jobs
	if jobs <= 0 {
		jobs = 4 * runtime.GOMAXPROCS(0)
	}
	opts, id, err := b.installOptions(ctx, l.Target.Python)
	if err != nil {
		return err
	}
	n := len(l.Packages)
	trees := make([]Tree, n)
	var missing []int
	q := newQueue(l.Packages)
	for i, p := range l.Packages {
		trees[i] = b.treeOf(p, id)
		if _, err := os.Stat(trees[i].Dir); err != nil {
			missing = append(missing, i)
		} else {
			q.push(i) // built: at hand
		}
	}
	switch {
	case len(missing) > 0 && opts.Interpreter != "":
		c, err := b.compiler(ctx, compileProcs(jobs))
		if err != nil {
			return err
		}
		defer func() { go c.Close() }() // idle by then: their exit need not hold the build up
		opts.Compiler = c
	case opts.Interpreter != "":
		if c := b.takeSpare(); c != nil {
			c.Close() // nothing to compile
		}
	}

	// Each tree's native libraries are checked beside fn's work on it.
	user := fn
	fn = func(ctx context.Context, i int, t Tree) error {
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() error { return b.flagNative(gctx, t, l.Target.Platform) })
		g.Go(func() error { return user(gctx, i, t) })
		return g.Wait()
	}

	g, ctx := errgroup.WithContext(ctx)
	whl := make([]string, n) // the wheel of each missing tree, once fetched
	fetching := make(chan struct{}, downloads)
	for _, i := range missing {
		g.Go(func() error {
			select {
			case fetching <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			w, err := b.Wheel(ctx, l.Packages[i])
			<-fetching
			if err != nil {
				return fmt.Errorf("%s: %w", l.Packages[i].Filename, err)
			}
			whl[i] = w
			q.push(i)
			return nil
		})
	}
	var taken atomic.Int64
	for range min(jobs, n) {
		g.Go(func() error {
			for taken.Add(1) <= int64(n) {
				i, err := q.pop(ctx)
				if err != nil {
					return err
				}
				t := trees[i]
				if whl[i] == "" { // read after pop: the push happened before
					if err := fn(ctx, i, t); err != nil {
						return err
					}
					continue
				}
				if err := b.install(ctx, t, whl[i], opts, func(t Tree) error { return fn(ctx, i, t) }); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait() // the first failure; the others were canceled
}

// queue hands out the packages whose wheels are at hand, the biggest first.
type queue struct {
	pkgs  []lock.Package
	ready chan struct{} // one token per package pushed
	mu    sync.Mutex
	at    []int // pushed, not yet popped
}

func newQueue(pkgs []lock.Package) *queue {
	return &queue{pkgs: pkgs, ready: make(chan struct{}, len(pkgs))}
}

func (q *queue) push(i int) {
	q.mu.Lock()
	q.at = append(q.at, i)
	q.mu.Unlock()
	q.ready <- struct{}{}
}

func (q *queue) pop(ctx context.Context) (int, error) {
	select {
	case <-q.ready:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	best := 0
	for k, i := range q.at {
		if q.pkgs[i].Size > q.pkgs[q.at[best]].Size {
			best = k
		}
	}
	i := q.at[best]
	q.at = slices.Delete(q.at, best, best+1)
	return i, nil
}
