package broker

import "sync"

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
