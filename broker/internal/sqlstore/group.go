package sqlstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Group commit: write transactions wait in this process's queue (for SQLite, which takes
// one writer at a time, instead of in the database's busy handler, which sleeps up to
// 100 ms between tries, the tail of every burst), and one leader runs all that are
// waiting in a single transaction, so a burst of N writes costs a few commits (and syncs)
// instead of N. If a write fails, or the commit does, the batch is rolled back and each
// write runs again alone (commitAll): every caller gets the outcome it would have had
// alone.
//
// There are no savepoints. SQLite had each write of a batch in its own (so that a failed
// one rolled back alone), but measured in bench/broker.sh those two statements per write,
// and each write's rows inserted one statement at a time, made the batches the part of a
// POST's time that grew with the burst: without them, a classifying POST's time in the
// server went from 26 to 15-17 ms (p50), and the POST p99's ratio to the floor from
// 3.6-4.5x to 2.7-3.3x (medians of 5 rounds, three runs each way, alternated). Failed
// writes are rare (a request that moved on, in another process), and cost a batch a retry.

// maxBatch bounds the writes one commit carries, so that a long queue still commits
// (and answers) in steps.
const maxBatch = 64

// batchTimeout bounds one batch's transaction. The writes of a batch do not run under
// their callers' contexts: a caller that leaves must not interrupt the statement of
// another (SQLite rolls the whole transaction back on an interrupted write).
const batchTimeout = 30 * time.Second

type pendingWrite struct {
	ctx  context.Context
	fn   func(tx) error
	done chan error
}

type group struct {
	mu      sync.Mutex
	queue   []*pendingWrite
	leading bool
	batches atomic.Int64 // transactions committed or tried, for tests
	retries atomic.Int64 // batches run again one write at a time (commitAll)
}

// grouped runs fn in the next batch and waits for the batch's outcome. It waits even when
// ctx ends while fn runs, so that a caller never returns while its write may still
// commit; a write whose ctx ended before its turn is skipped with ctx's error.
func (s *Store) grouped(ctx context.Context, fn func(tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := &pendingWrite{ctx: ctx, fn: fn, done: make(chan error, 1)}
	g := &s.group
	g.mu.Lock()
	g.queue = append(g.queue, p)
	if !g.leading {
		g.leading = true
		go s.lead()
	}
	g.mu.Unlock()
	return <-p.done
}

// lead commits batches until the queue is empty.
func (s *Store) lead() {
	g := &s.group
	for {
		g.mu.Lock()
		n := min(len(g.queue), maxBatch)
		if n == 0 {
			g.leading = false
			g.mu.Unlock()
			return
		}
		batch := g.queue[:n:n]
		g.queue = append([]*pendingWrite(nil), g.queue[n:]...)
		g.mu.Unlock()
		s.commitBatch(batch)
	}
}

func (s *Store) commitBatch(batch []*pendingWrite) {
	live := batch[:0:0]
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.done <- err
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	s.group.batches.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	s.commitAll(ctx, live)
}

// commitAll runs the batch in one transaction, even a batch of one write, whose rows go in
// as a batch's (batch.go). If any write fails, or the commit does, nothing of the batch
// happened: each write is then run again in its own transaction, so every caller gets the
// outcome it would have had alone. A write may run twice; the store's writes only assign
// what their closures capture, never accumulate.
//
// The batch's inserts of requests, bindings and audit events wait until its writes have
// run and go in a few multi-row statements (batch.go): a burst of creates costs a handful
// of round trips, not three each. A row one of them refuses (a duplicate ID, a session
// that does not exist) fails the batch, and alone the write finds out which.
func (s *Store) commitAll(ctx context.Context, live []*pendingWrite) {
	err := s.runBatch(ctx, true, true, func(t tx) error {
		for _, p := range live {
			if err := p.fn(t); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		for _, p := range live {
			p.done <- nil
		}
		return
	}
	s.group.retries.Add(1)
	for _, p := range live {
		p.done <- s.runTx(ctx, true, p.fn)
	}
}
