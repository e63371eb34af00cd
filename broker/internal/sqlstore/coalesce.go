package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Read coalescing, the read side of group commit: the broker's hot calls each read one row
// by its key (a session for env, a request for a long poll, a token for a first call), and
// under a burst of agents those point reads, one round trip each, held every connection of
// the pool (measured on PostgreSQL, 200 agents at once: 1,128 waits for a connection, 22 s
// in all, for 1,400 reads whose execution took 30 ms). A read that finds fewer than
// Dialect.ReadBatches batches of its kind running runs at once, alone or with the reads that
// wait; one that finds them all running waits, and the next batch to start carries every
// read waiting then in one query (WHERE key IN the list). So an idle store answers each read
// with its own query, and a burst costs a few queries.
//
// A batch starts after every read it carries was asked for, so each sees every write that
// committed before it was asked, as its own query would have: a long poll that registers
// and then reads misses no change. The read that starts a batch runs it in its own
// goroutine (no hand-off on an idle store) and so returns when the batch ends, at most
// readTimeout, even if its context ended first; a read that waits returns at once.

// maxReadBatch bounds the keys of one query.
const maxReadBatch = 256

// readTimeout bounds one batch's query. It does not run under its callers' contexts: a
// caller that leaves must not fail the reads of the others; it stops waiting instead.
const readTimeout = 30 * time.Second

// pointReads coalesces the reads of one kind of row by key.
type pointReads[T any] struct {
	what    string // what a row is, for errors
	one     string // the query of one key, bound to ?
	many    string // the query of a list of keys, bound to one parameter (Dialect.ListArg)
	scan    func(sc scanner) (T, error)
	key     func(T) string
	mu      sync.Mutex
	queue   []*pointRead[T]
	running int
	queries atomic.Int64 // queries run, for tests
}

// newPointReads reads rows with sel ("SELECT ... FROM ... WHERE key"), each keyed by key.
func newPointReads[T any](d *Dialect, what, sel string, scan func(scanner) (T, error), key func(T) string) *pointReads[T] {
	return &pointReads[T]{what: what, one: sel + ` = ?`, many: sel + ` ` + d.InList, scan: scan, key: key}
}

type pointRead[T any] struct {
	key  string
	done chan pointResult[T]
}

type pointResult[T any] struct {
	v     T
	found bool
	err   error
}

// get reads the row of key, coalesced with the reads of the same kind around it. found is
// false, with no error, when there is no such row.
func (p *pointReads[T]) get(ctx context.Context, s *Store, key string) (v T, found bool, err error) {
	if err := ctx.Err(); err != nil {
		return v, false, err
	}
	if !plainKey(key) { // no row has it: the store creates none (and PostgreSQL could not)
		return v, false, nil
	}
	r := &pointRead[T]{key: key, done: make(chan pointResult[T], 1)}
	if s.d.ReadBatches == 0 { // alone: not coalesced
		rows, bad, err := p.read(ctx, s, []*pointRead[T]{r})
		if err == nil {
			err = bad[key]
		}
		v, found = rows[key]
		return v, found, err
	}
	p.mu.Lock()
	p.queue = append(p.queue, r)
	if p.running < s.d.ReadBatches {
		p.running++
		batch := p.take()
		p.mu.Unlock()
		p.run(s, batch) // in this goroutine: it carries its own read
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.running--
		} else {
			go p.drain(s) // what queued meanwhile goes in a batch of its own
		}
	}
	p.mu.Unlock()
	select {
	case res := <-r.done:
		return res.v, res.found, res.err
	case <-ctx.Done():
		return v, false, ctx.Err()
	}
}

// plainKey reports whether key can name a row: valid UTF-8 without NUL. PostgreSQL takes
// no other text, so the store creates no row with another key on either database, and a
// read of one finds nothing without a query: it neither fails nor fails the batch it
// would have shared.
func plainKey(key string) bool {
	return utf8.ValidString(key) && !strings.ContainsRune(key, 0)
}

// take removes the next batch from the queue; p.mu is held.
func (p *pointReads[T]) take() []*pointRead[T] {
	n := min(len(p.queue), maxReadBatch)
	batch := p.queue[:n:n]
	p.queue = append([]*pointRead[T](nil), p.queue[n:]...)
	return batch
}

// drain runs batches until the queue is empty, then gives up its slot.
func (p *pointReads[T]) drain(s *Store) {
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.running--
			p.mu.Unlock()
			return
		}
		batch := p.take()
		p.mu.Unlock()
		p.run(s, batch)
	}
}

// run reads the rows of batch and answers each read.
func (p *pointReads[T]) run(s *Store, batch []*pointRead[T]) {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	rows, bad, err := p.read(ctx, s, batch)
	for _, r := range batch {
		v, ok := rows[r.key]
		res := pointResult[T]{v: v, found: ok, err: err}
		if err == nil {
			res.err = bad[r.key]
		}
		r.done <- res
	}
}

// read returns the rows of the batch's keys, and the errors of rows that did not decode.
func (p *pointReads[T]) read(ctx context.Context, s *Store, batch []*pointRead[T]) (map[string]T, map[string]error, error) {
	keys := make([]string, 0, len(batch))
	seen := make(map[string]bool, len(batch))
	for _, r := range batch {
		if !seen[r.key] {
			seen[r.key] = true
			keys = append(keys, r.key)
		}
	}
	p.queries.Add(1)
	var rs *sql.Rows
	var err error
	if len(keys) == 1 {
		rs, err = s.query(ctx, p.one, keys[0])
	} else {
		rs, err = s.query(ctx, p.many, s.d.ListArg(keys))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", p.what, err)
	}
	defer rs.Close()
	out := make(map[string]T, len(keys))
	var bad map[string]error // rows that scanned their key but not the rest: theirs alone
	for rs.Next() {
		v, err := p.scan(rs)
		if err != nil {
			k := p.key(v)
			if k == "" {
				return nil, nil, fmt.Errorf("reading %s: %w", p.what, err)
			}
			if bad == nil {
				bad = map[string]error{}
			}
			bad[k] = err
			continue
		}
		out[p.key(v)] = v
	}
	if err := rs.Err(); err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", p.what, err)
	}
	return out, bad, nil
}
