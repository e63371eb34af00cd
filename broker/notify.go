package broker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
)

// notifier wakes long polls when a request changes: one channel per watched request,
// closed by notify and dropped when its last waiter leaves.
type notifier struct {
	mu sync.Mutex
	m  map[string]*watch
}

type watch struct {
	ch chan struct{}
	n  int
}

func newNotifier() *notifier { return &notifier{m: map[string]*watch{}} }

// wait returns a channel closed at the next notify(id), and a release func to call when
// done waiting.
func (n *notifier) wait(id string) (<-chan struct{}, func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w := n.m[id]
	if w == nil {
		w = &watch{ch: make(chan struct{})}
		n.m[id] = w
	}
	w.n++
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			w.n--
			if w.n == 0 && n.m[id] == w {
				delete(n.m, id)
			}
		})
	}
}

func (n *notifier) notify(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w := n.m[id]; w != nil {
		close(w.ch)
		delete(n.m, id)
	}
}

// notifyAll wakes every waiter (at shutdown).
func (n *notifier) notifyAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, w := range n.m {
		close(w.ch)
		delete(n.m, id)
	}
}

// watched is the number of requests with waiters (for tests and metrics).
func (n *notifier) watched() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.m)
}

// Notify wakes the long polls of a request. The builder calls it after every change it
// makes to a request; the server calls it for its own changes.
func (s *Server) Notify(requestID string) {
	s.waiters.notify(requestID)
	s.ui.changed()
}

// feedState is what the server knows of its store's change feed.
type feedState struct {
	present   atomic.Bool  // the store is a ChangeFeed and Serve follows it
	listening atomic.Bool  // it listens now
	changes   atomic.Int64 // notifications received
}

// followFeed follows the store's change feed, if it has one, until ctx ends: a change
// by any replica that may have ended a request wakes this replica's long polls on it (and
// one of no request all of them), and tells the builder (Ended); one that left it open
// (claimed, building) wakes none, since a long poll waits for a terminal state.
// The returned channel is closed when it has stopped.
func (s *Server) followFeed(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	cf, ok := s.o.Store.(ChangeFeed)
	if !ok {
		close(done)
		return done
	}
	s.feed.present.Store(true)
	go func() {
		defer close(done)
		ended, _ := s.o.Builder.(Ended)
		_ = cf.Follow(ctx, func(c Change) {
			s.feed.changes.Add(1)
			switch {
			case c.RequestID == "":
				s.waiters.notifyAll()
			case !c.Open: // terminal, or the store did not say: a long poll reads it
				s.waiters.notify(c.RequestID)
			}
			if ended != nil && (c.RequestID == "" || !c.Open) {
				ended.RequestEnded()
			}
			s.ui.changed()
		}, func(err error) {
			s.feed.listening.Store(err == nil)
			if err != nil {
				s.log.LogAttrs(ctx, slog.LevelWarn, "change feed down: long polls fall back to rechecking", slog.String("error", err.Error()))
			} else {
				s.log.LogAttrs(ctx, slog.LevelInfo, "change feed listening")
			}
		})
		s.feed.listening.Store(false)
	}()
	return done
}
