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

// Lanes. On a database that runs write transactions side by side (Dialect.Lanes:
// PostgreSQL), the writes of the server's own background work (claiming, renewing and
// finishing builds, binding what a build published, storing background classifications,
// leases: inBackground) queue in a group of their own, whose leader commits on another
// connection beside the clients' group. A client's write then never waits behind a
// batch of that work, nor shares a transaction with its statements (a ClaimBuild's
// SELECT ... FOR UPDATE keeps a batch out of Dialect.Pipeline's single round trip), and
// a lease renewal or build claim never waits behind a client's slow or stuck write
// (TestBackgroundLane). Measured in bench/broker.sh (200 agents, one replica on
// PostgreSQL, 15 rounds each way, the two builds interleaved), the POST p99 went from 54
// to 42 ms (medians), its ratio to the floor from 3.73x to 3.39x: a gain, smaller than
// the floor's own spread from round to round (8-19 ms).
//
// Every caller still waits for its own commit, so nothing that follows a write can
// overtake it; writes in flight at once in two lanes had no order before either. Two
// batches that lock the same rows in opposite orders are a deadlock, which PostgreSQL
// breaks by failing one of them: that batch then runs again one write at a time, as any
// failed batch does, and every caller still gets the outcome it would have had alone.
// SQLite takes one writer at a time: there, both kinds share one group.

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

// grouped runs fn in the next batch of g (s.group, or s.background's) and waits for the
// batch's outcome. It waits even when ctx ends while fn runs, so that a caller never
// returns while its write may still commit; a write whose ctx ended before its turn is
// skipped with ctx's error.
func (s *Store) grouped(ctx context.Context, g *group, fn func(tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := &pendingWrite{ctx: ctx, fn: fn, done: make(chan error, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, p)
	if !g.leading {
		g.leading = true
		go s.lead(g)
	}
	g.mu.Unlock()
	return <-p.done
}

// lead commits g's batches until its queue is empty.
func (s *Store) lead(g *group) {
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
		s.commitBatch(g, batch)
	}
}

func (s *Store) commitBatch(g *group, batch []*pendingWrite) {
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
	g.batches.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	s.commitAll(ctx, g, live)
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
func (s *Store) commitAll(ctx context.Context, g *group, live []*pendingWrite) {
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
	g.retries.Add(1)
	for _, p := range live {
		p.done <- s.runTx(ctx, true, p.fn)
	}
}
