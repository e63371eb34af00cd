// Package memo is a small bounded in-memory cache whose entries may expire: the broker's
// and the builder's hot-path caches (parsed locks by content, layers found published,
// interpreter targets by digest). A map and a mutex do the job; a cache library would
// bring an eviction policy and goroutines nothing here needs.
package memo

import (
	"sort"
	"sync"
	"time"
)

// Cache is a map from string to V of at most Max entries (past it, the expired and then
// the older half go) whose entries expire TTL after they were put (never, with TTL 0).
// It is safe for concurrent use.
type Cache[V any] struct {
	mu  sync.Mutex
	ttl time.Duration
	max int
	m   map[string]entry[V]
}

type entry[V any] struct {
	v  V
	at time.Time
}

// New returns an empty cache of at most size entries (at least 2) that expire after ttl.
func New[V any](size int, ttl time.Duration) *Cache[V] {
	return &Cache[V]{ttl: ttl, max: max(size, 2), m: map[string]entry[V]{}}
}

// Get returns the value put under k, unless it expired or was dropped.
func (c *Cache[V]) Get(k string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if ok && c.ttl > 0 && time.Since(e.at) >= c.ttl {
		delete(c.m, k)
		var zero V
		return zero, false
	}
	return e.v, ok
}

// Put stores v under k.
func (c *Cache[V]) Put(k string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		c.evict()
	}
	c.m[k] = entry[V]{v: v, at: time.Now()}
}

// Forget drops k.
func (c *Cache[V]) Forget(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, k)
}

// Len is the number of entries held, expired ones included.
func (c *Cache[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// evict drops the expired entries and, if that is not enough, the older half.
func (c *Cache[V]) evict() {
	ats := make([]time.Time, 0, len(c.m))
	for k, e := range c.m {
		if c.ttl > 0 && time.Since(e.at) >= c.ttl {
			delete(c.m, k)
			continue
		}
		ats = append(ats, e.at)
	}
	if len(c.m) < c.max/2 {
		return
	}
	sort.Slice(ats, func(i, j int) bool { return ats[i].Before(ats[j]) })
	mid := ats[len(ats)/2]
	for k, e := range c.m {
		if !e.at.After(mid) {
			delete(c.m, k)
		}
	}
}
