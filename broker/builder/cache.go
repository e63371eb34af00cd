package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"sync"
	"time"

	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/target"
)

// The worker's hot-path caches: what a request's classification resolved, what this
// worker found published, and interpreter targets. With them, a request whose layer was
// classified or published here moments ago is bound without resolving against the index
// or asking the repository again.
const (
	// maxCached bounds each cache; past it the oldest half is dropped.
	maxCached = 4096
	// publishedTTL is how long a tag this worker published or found stays known without
	// asking the repository: as long as a classification is shared, so a layer removed
	// from the repository is noticed as soon as a changed index would be.
	publishedTTL = classifyTTL
)

// cache is a bounded map whose entries expire after ttl (never when ttl is 0).
type cache[V any] struct {
	mu  sync.Mutex
	ttl time.Duration
	m   map[string]cached[V]
}

type cached[V any] struct {
	v  V
	at time.Time
}

func newCache[V any](ttl time.Duration) *cache[V] {
	return &cache[V]{ttl: ttl, m: map[string]cached[V]{}}
}

func (c *cache[V]) get(k string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if ok && c.ttl > 0 && time.Since(e.at) >= c.ttl {
		delete(c.m, k)
		ok = false
	}
	return e.v, ok
}

func (c *cache[V]) put(k string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCached {
		c.evict()
	}
	c.m[k] = cached[V]{v: v, at: time.Now()}
}

// evict drops the expired entries and, if that is not enough, the older half.
func (c *cache[V]) evict() {
	ats := make([]time.Time, 0, len(c.m))
	for k, e := range c.m {
		if c.ttl > 0 && time.Since(e.at) >= c.ttl {
			delete(c.m, k)
			continue
		}
		ats = append(ats, e.at)
	}
	if len(c.m) < maxCached/2 {
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

func (c *cache[V]) forget(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, k)
}

// workerCaches are the Worker's caches.
type workerCaches struct {
	locks     *cache[*lock.Lock]     // resolved locks by lockCacheKey
	bases     *cache[*lock.Lock]     // parsed base locks by the sha256 of their bytes
	published *cache[v1.Descriptor]  // layers in the repository by tag
	targets   *cache[*target.Target] // interpreter targets by artifact digest (immutable)
}

func newWorkerCaches() workerCaches {
	return workerCaches{locks: newCache[*lock.Lock](0), bases: newCache[*lock.Lock](0), published: newCache[v1.Descriptor](publishedTTL), targets: newCache[*target.Target](0)}
}

// lockCacheKey names the lock resolved on the session base base (an artifact digest) for
// a request whose classification's lock has key (Request.LockKey, a content key), ext or
// isolated.
func lockCacheKey(base, key string, isolated bool) string {
	kind := "ext"
	if isolated {
		kind = "iso"
	}
	return kind + "\x00" + base + "\x00" + key
}

// sessionBase is s's base lock, parsed once per content.
func (w *Worker) sessionBase(s broker.Session) (*lock.Lock, error) {
	sum := sha256.Sum256(s.BaseLock)
	k := hex.EncodeToString(sum[:])
	if l, ok := w.c.bases.get(k); ok && len(s.BaseLock) > 0 {
		return l, nil
	}
	l, err := sessionBase(s)
	if err == nil {
		w.c.bases.put(k, l)
	}
	return l, err
}
