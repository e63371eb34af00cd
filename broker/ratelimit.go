package broker

import (
	"math"
	"sync"
	"time"
)

// limiter is a set of token buckets by key: each holds up to burst tokens and gains one
// every `every`; an attempt takes one. It keeps at most maxKeys buckets: a full bucket is
// the same as none, so those go first when it must make room.
type limiter struct {
	burst   float64
	every   time.Duration
	maxKeys int

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newLimiter(burst int, every time.Duration, maxKeys int) *limiter {
	return &limiter{burst: float64(burst), every: every, maxKeys: maxKeys, buckets: map[string]*bucket{}}
}

// refill brings b up to now.
func (l *limiter) refill(b *bucket, now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = math.Min(l.burst, b.tokens+float64(d)/float64(l.every))
		b.at = now
	}
}

// allow takes a token of key at now. When there is none it returns false and how long
// until there is.
func (l *limiter) allow(key string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= l.maxKeys {
			l.makeRoom(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	l.refill(b, now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) * float64(l.every))
}

// refund gives key back the token an attempt took.
func (l *limiter) refund(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.buckets[key]; b != nil {
		b.tokens = math.Min(l.burst, b.tokens+1)
	}
}

// makeRoom drops the full buckets, or if none is full, half of them. l.mu is held.
func (l *limiter) makeRoom(now time.Time) {
	for k, b := range l.buckets {
		if l.refill(b, now); b.tokens >= l.burst {
			delete(l.buckets, k)
		}
	}
	for k := range l.buckets {
		if len(l.buckets) < l.maxKeys/2 {
			break
		}
		delete(l.buckets, k)
	}
}
