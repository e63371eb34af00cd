package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// Dialect is what differs between the databases the store runs on.
type Dialect struct {
	// Numbered placeholders ($1, $2, ...) instead of '?'.
	Numbered bool
	// ForUpdate is appended to a SELECT that reads a row to change it ("" where the
	// transaction holds the write lock already, as SQLite's BEGIN IMMEDIATE does).
	ForUpdate string
	// SkipLocked is appended to the subquery that picks a buildable request, so that
	// claimers pass over rows another claimer holds.
	SkipLocked string
	// Migrations: Migrations[i] is schema version i+1. Never edit a released one.
	Migrations []string
	// LockMigrations, if set, runs first in the migration transaction so that processes
	// starting at once migrate one after the other.
	LockMigrations string
	// Notify, if set, runs once at the end of every transaction that changed requests,
	// with an array of one payload per change (broker.ChangePayload), to tell the other
	// replicas at commit (PostgreSQL: pg_notify over unnest).
	Notify string
	// CheckWrite proves the database accepts a write without changing what it holds.
	CheckWrite func(ctx context.Context, tx *sql.Tx) error
	// Prepare keeps every statement prepared, the reads outside transactions and the
	// transactions' own (a driver without its own statement cache parses every query
	// again: SQLite's, where a group commit batch of 64 creates ran 320 statements).
	Prepare bool
	// GroupCommit queues this process's write transactions and commits those waiting
	// together (group.go): fewer commits, syncs and round trips under a burst.
	GroupCommit bool
	// Lanes, with GroupCommit, commits the background's writes (inBackground) in a group
	// of their own, beside the clients' (group.go): the database runs two write
	// transactions at once, and the transactions' pool has a connection for each leader.
	Lanes bool
	// ReadBatches, if not 0, coalesces the point reads of sessions, requests and tokens
	// (coalesce.go): at most this many queries of a kind run at once, and the reads that
	// arrive meanwhile go together in the next. InList completes "WHERE key" for a list
	// of keys bound to one parameter, ListArg.
	ReadBatches int
	InList      string
	ListArg     func(keys []string) any
	// ClassifyMany, if set, applies a group commit batch's classifications in one
	// statement (batch.go), with one array parameter per column, passed as []string and
	// []int64: id, session_id, state, decision, reasons, isolated, packages, lock_key,
	// digest, error, updated; then the number of requests.
	// It changes only requests classifying in their session, and fails unless it
	// changed them all: the statement itself, since in a Pipeline nothing can look at
	// its count before the commit.
	ClassifyMany string
	// Arrays: a multi-row insert binds one array per column, INSERT ... SELECT * FROM
	// unnest(?::text[], ?::bigint[], ...), one statement for any number of rows
	// (batch.go's insertMany); else VALUES lists of at most maxRows rows.
	Arrays bool
	// Pipeline, if set, runs stmts on a connection of db in one round trip and one
	// transaction, all or nothing (PostgreSQL: a pgx batch, which the server runs as one
	// implicit transaction). A group commit batch whose writes ran no statement of their
	// own is sent so: its inserts, classifications and notifications. It returns
	// ErrNoPipeline, having sent nothing, when the connection cannot (a wrapped driver's,
	// in tests): the statements then run one by one in a transaction.
	Pipeline func(ctx context.Context, db *sql.DB, stmts []Stmt) error
}

// ErrNoPipeline: Dialect.Pipeline sent nothing, and the statements run one by one.
var ErrNoPipeline = errors.New("this connection cannot pipeline")

// Store is a broker.Store over a database/sql handle.
type Store struct {
	db *sql.DB // reads outside transactions
	w  *sql.DB // transactions: the same pool as db, or one of their own (NewSplit)
	d  *Dialect

	mu    sync.Mutex
	bound map[string]string // query with '?' -> query with the dialect's placeholders

	group      group // the write queue, with Dialect.GroupCommit
	background group // the background's write queue, with Dialect.Lanes (group.go)

	sessions *pointReads[broker.Session] // coalesced point reads (coalesce.go)
	requests *pointReads[broker.Request]
	tokens   *pointReads[broker.Token]

	smu   sync.Mutex
	stmts map[string]*sql.Stmt // prepared statements, with Dialect.Prepare
}

// maxStmts bounds the prepared statements: the writes and the list queries' filters make a
// few dozen shapes.
const maxStmts = 256

// stmt returns query prepared, or nil when the dialect does not prepare (or the
// cache is full, or preparing failed: the caller runs the query unprepared, and its error
// is the query's own).
func (s *Store) stmt(ctx context.Context, query string) *sql.Stmt {
	if !s.d.Prepare {
		return nil
	}
	s.smu.Lock()
	defer s.smu.Unlock()
	if st, ok := s.stmts[query]; ok {
		return st
	}
	if len(s.stmts) >= maxStmts {
		return nil
	}
	st, err := s.db.PrepareContext(ctx, s.q(query))
	if err != nil {
		return nil
	}
	if s.stmts == nil {
		s.stmts = map[string]*sql.Stmt{}
	}
	s.stmts[query] = st
	return st
}

// query runs a read outside any transaction, prepared where the dialect says so.
func (s *Store) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := s.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return s.db.QueryContext(ctx, s.q(query), args...)
}

// queryRow is query for one row.
func (s *Store) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if st := s.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return s.db.QueryRowContext(ctx, s.q(query), args...)
}

var (
	_ broker.Store             = (*Store)(nil)
	_ broker.WriteChecker      = (*Store)(nil)
	_ broker.VersionedSessions = (*Store)(nil)
)

// VersionsSessions implements broker.VersionedSessions: both dialects' migrations add
// sessions.version (default 0) and the triggers that move it.
func (s *Store) VersionsSessions() {}

// New brings db's schema up to date and returns the store; Close closes db.
func New(ctx context.Context, db *sql.DB, d *Dialect) (*Store, error) {
	return NewSplit(ctx, db, db, d)
}

// NewSplit is New with the transactions on a pool of their own, writes, and the reads
// outside them on reads: under a burst of reads a group commit's leader then never waits
// behind them for a connection (measured on PostgreSQL, 200 agents at once: 1,410 waits
// for the pool of 16, 25 s in all, most of a request's create). Close closes both.
func NewSplit(ctx context.Context, reads, writes *sql.DB, d *Dialect) (*Store, error) {
	s := &Store{db: reads, w: writes, d: d, bound: map[string]string{},
		sessions: newPointReads(d, "sessions", `SELECT `+sessionCols+` FROM sessions WHERE id`, scanSession,
			func(se broker.Session) string { return se.ID }),
		requests: newPointReads(d, "requests", `SELECT `+requestCols+` FROM requests WHERE id`, scanRequest,
			func(r broker.Request) string { return r.ID }),
		tokens: newPointReads(d, "tokens", `SELECT hash, role, subject, created FROM tokens WHERE hash`, scanToken,
			func(t broker.Token) string { return t.Hash }),
	}
	if err := s.migrate(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// DB gives the underlying database, for backups and for tests that check the triggers.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the prepared statements and the database.
func (s *Store) Close() error {
	s.smu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = nil
	s.smu.Unlock()
	err := s.db.Close()
	if s.w != s.db {
		err = errors.Join(err, s.w.Close())
	}
	return err
}

// SchemaVersion is the schema version of the dialect's migrations.
func (d *Dialect) SchemaVersion() int { return len(d.Migrations) }

// q rewrites a query written with '?' placeholders for the dialect.
func (s *Store) q(query string) string {
	if !s.d.Numbered {
		return query
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.bound[query]; ok {
		return b
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	s.bound[query] = b.String()
	return b.String()
}

// tx is a transaction that rewrites placeholders. A detached one (a group commit's) runs
// its statements without its callers' cancellation.
type tx struct {
	s        *Store
	h        *txHandle
	detached bool
	notes    *[]string // the changes to announce at commit (notify)
	// later, in a batch of a group commit, holds the rows its writes
	// append (requests, bindings, audit events), inserted together at its end (batch.go).
	later *later
}

func (t tx) ctx(ctx context.Context) context.Context {
	if t.detached {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// txHandle is a transaction begun when its first statement runs: a group commit batch
// whose writes only append rows (batch.go) never begins one, and with Dialect.Pipeline
// sends its statements in one round trip instead.
type txHandle struct {
	tx    *sql.Tx
	err   error
	begin func() (*sql.Tx, error)
}

// raw returns the transaction, begun now if it was not.
func (t tx) raw() (*sql.Tx, error) {
	h := t.h
	if h.tx == nil && h.err == nil {
		h.tx, h.err = h.begin()
	}
	return h.tx, h.err
}

// stmt returns the transaction, begun now if it was not, and query prepared for it
// where the dialect prepares (the store's statement, which database/sql prepares once on
// each connection), or nil: then the caller runs query on the transaction itself.
func (t tx) stmt(ctx context.Context, query string) (*sql.Tx, *sql.Stmt, error) {
	x, err := t.raw()
	if err != nil {
		return nil, nil, err
	}
	if st := t.s.stmt(ctx, query); st != nil {
		return x, x.StmtContext(t.ctx(ctx), st), nil
	}
	return x, nil, nil
}

func (t tx) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	x, st, err := t.stmt(ctx, query)
	switch {
	case err != nil:
		return nil, err
	case st != nil:
		return st.ExecContext(t.ctx(ctx), args...)
	}
	return x.ExecContext(t.ctx(ctx), t.s.q(query), args...)
}

func (t tx) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	x, st, err := t.stmt(ctx, query)
	switch {
	case err != nil:
		return nil, err
	case st != nil:
		return st.QueryContext(t.ctx(ctx), args...)
	}
	return x.QueryContext(t.ctx(ctx), t.s.q(query), args...)
}

// scanner is a row to scan: *sql.Row, *sql.Rows, or errRow.
type scanner interface{ Scan(...any) error }

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

func (t tx) queryRow(ctx context.Context, query string, args ...any) scanner {
	x, st, err := t.stmt(ctx, query)
	switch {
	case err != nil:
		return errRow{err}
	case st != nil:
		return st.QueryRowContext(t.ctx(ctx), args...)
	}
	return x.QueryRowContext(t.ctx(ctx), t.s.q(query), args...)
}

// inTx runs fn in a write transaction and commits it unless fn fails.
func (s *Store) inTx(ctx context.Context, fn func(tx) error) error {
	return s.inGroup(ctx, &s.group, fn)
}

// inBackground is inTx for a write of the server's own background work (builds, leases,
// background classifications), in a lane of its own where the database allows (Lanes).
func (s *Store) inBackground(ctx context.Context, fn func(tx) error) error {
	return s.inGroup(ctx, s.backgroundLane(), fn)
}

// backgroundLane is the group of the background's writes: their own with Lanes.
func (s *Store) backgroundLane() *group {
	if s.d.Lanes {
		return &s.background
	}
	return &s.group
}

func (s *Store) inGroup(ctx context.Context, g *group, fn func(tx) error) error {
	if s.d.GroupCommit {
		return s.grouped(ctx, g, fn)
	}
	return s.runTx(ctx, false, fn)
}

// exec runs one writing statement: in the group's next batch with GroupCommit (a
// statement outside it would wait in the database's busy handler), else on its own.
func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return s.execIn(ctx, &s.group, query, args...)
}

// execBackground is exec for a write of the background's (inBackground).
func (s *Store) execBackground(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return s.execIn(ctx, s.backgroundLane(), query, args...)
}

func (s *Store) execIn(ctx context.Context, g *group, query string, args ...any) (sql.Result, error) {
	if !s.d.GroupCommit {
		return s.w.ExecContext(ctx, s.q(query), args...)
	}
	var res sql.Result
	err := s.inGroup(ctx, g, func(t tx) error {
		var err error
		res, err = t.exec(ctx, query, args...)
		return err
	})
	return res, err
}

// runTx runs fn in one transaction under ctx and commits it unless fn fails.
func (s *Store) runTx(ctx context.Context, detached bool, fn func(tx) error) error {
	return s.runBatch(ctx, detached, false, fn)
}

// runBatch is runTx; with batch, the rows fn appends are inserted at its end, many to a
// statement (batch.go). A batch whose writes ran no statement of their own, on a dialect
// with Pipeline, sends those inserts and its notifications in one round trip, one
// transaction; any other begins its transaction at its first statement.
func (s *Store) runBatch(ctx context.Context, detached, batch bool, fn func(tx) error) error {
	h := &txHandle{begin: func() (*sql.Tx, error) {
		t, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			return nil, fmt.Errorf("starting transaction: %w", err)
		}
		return t, nil
	}}
	x := tx{s: s, h: h, detached: detached, notes: new([]string)}
	if batch {
		x.later = &later{}
	}
	pipelined := batch && s.d.Pipeline != nil
	if !pipelined {
		if _, err := x.raw(); err != nil {
			return err
		}
	}
	defer func() {
		if h.tx != nil {
			h.tx.Rollback() //nolint:errcheck // a no-op after Commit
		}
	}()
	if err := fn(x); err != nil {
		return err
	}
	stmts := x.deferred()
	if h.tx == nil && h.err == nil { // pipelined, and nothing ran yet
		if len(stmts) == 0 {
			return nil
		}
		q := make([]Stmt, len(stmts))
		for i, st := range stmts {
			q[i] = Stmt{Query: s.q(st.query), Args: st.args}
		}
		err := s.d.Pipeline(x.ctx(ctx), s.w, q)
		if !errors.Is(err, ErrNoPipeline) {
			if err != nil {
				return fmt.Errorf("writing a batch of %d statements (%s, ...): %w", len(stmts), stmts[0].what, err)
			}
			return nil
		}
	}
	for _, st := range stmts {
		if _, err := x.exec(ctx, st.query, st.args...); err != nil {
			return fmt.Errorf("%s: %w", st.what, err)
		}
	}
	t, err := x.raw()
	if err != nil {
		return err
	}
	if err := t.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func toJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (t tx) exists(ctx context.Context, query string, args ...any) (bool, error) {
	var one int
	err := t.queryRow(ctx, query, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (t tx) sessionExists(ctx context.Context, id string) error {
	ok, err := t.exists(ctx, `SELECT 1 FROM sessions WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("looking up session %q: %w", id, err)
	}
	if !ok {
		return fmt.Errorf("session %q: %w", id, broker.ErrNotFound)
	}
	return nil
}

// CreateSession implements broker.Store.
func (s *Store) CreateSession(ctx context.Context, se broker.Session, audit ...broker.AuditEvent) error {
	return s.insertAudited(ctx, checkSession(se), func(t tx) error { return t.insertSession(ctx, se) }, audit)
}

// insertAudited runs insert and appends audit in one transaction, unless invalid (the
// check of what is inserted) is an error.
func (s *Store) insertAudited(ctx context.Context, invalid error, insert func(tx) error, audit []broker.AuditEvent) error {
	if invalid != nil {
		return invalid
	}
	return s.inTx(ctx, func(t tx) error {
		if err := insert(t); err != nil {
			return err
		}
		return t.audit(ctx, audit...)
	})
}

// CreateSessionToken implements broker.Store.
func (s *Store) CreateSessionToken(ctx context.Context, se broker.Session, tok broker.Token, audit ...broker.AuditEvent) error {
	return s.insertAudited(ctx, checkSessionToken(se, tok), func(t tx) error {
		if err := t.insertSession(ctx, se); err != nil {
			return err
		}
		if err := t.insertToken(ctx, tok); err != nil {
			return fmt.Errorf("creating session %q: %w", se.ID, err)
		}
		return nil
	}, audit)
}

// checkSessionToken checks a session and its agent token.
func checkSessionToken(se broker.Session, tok broker.Token) error {
	if err := checkSession(se); err != nil {
		return err
	}
	if err := checkToken(tok); err != nil {
		return err
	}
	if tok.Role != broker.RoleAgent || tok.Subject != se.ID {
		return fmt.Errorf("creating session %q: %w: its token is a %s token for %q, want an agent token for the session", se.ID, broker.ErrInvalid, tok.Role, tok.Subject)
	}
	return nil
}

func checkSession(se broker.Session) error {
	if se.ID == "" || se.Owner == "" {
		return fmt.Errorf("creating session: %w: ID and Owner are required", broker.ErrInvalid)
	}
	if !plainKey(se.ID) {
		return fmt.Errorf("creating session %q: %w: the ID must be UTF-8 without NUL", se.ID, broker.ErrInvalid)
	}
	return nil
}

func (t tx) insertSession(ctx context.Context, se broker.Session) error {
	return t.insertNew(ctx, fmt.Sprintf("creating session %q", se.ID), "it exists", `INSERT INTO sessions
		(id, owner, created, interpreter, base, base_lock) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		se.ID, se.Owner, nanos(se.Created), se.Interpreter, se.Base, se.BaseLock)
}

// insertNew runs query, an INSERT ... ON CONFLICT DO NOTHING of one row: ErrConflict
// (saying exists) when the row was there already. Errors begin with what.
func (t tx) insertNew(ctx context.Context, what, exists, query string, args ...any) error {
	res, err := t.exec(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	} else if n != 1 {
		return fmt.Errorf("%s: %w: %s", what, broker.ErrConflict, exists)
	}
	return nil
}

const sessionCols = `id, owner, created, interpreter, base, base_lock, version`

func scanSession(sc scanner) (broker.Session, error) {
	var se broker.Session
	var created int64
	if err := sc.Scan(&se.ID, &se.Owner, &created, &se.Interpreter, &se.Base, &se.BaseLock, &se.Version); err != nil {
		return se, err
	}
	if len(se.BaseLock) == 0 {
		se.BaseLock = nil
	}
	se.Created = fromNanos(created)
	return se, nil
}

// GetSession implements broker.Store.
func (s *Store) GetSession(ctx context.Context, id string) (broker.Session, error) {
	se, found, err := s.sessions.get(ctx, s, id)
	if err != nil {
		return se, fmt.Errorf("reading session %q: %w", id, err)
	}
	if !found {
		return se, fmt.Errorf("session %q: %w", id, broker.ErrNotFound)
	}
	return se, nil
}

// collect scans every row with scan and closes rows; errors say what was being listed.
func collect[T any](rows *sql.Rows, what string, scan func(sc scanner) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// SetSessionBase implements broker.Store.
func (s *Store) SetSessionBase(ctx context.Context, id, interpreter, base string, baseLock []byte) error {
	return s.inTx(ctx, func(t tx) error { return t.setBase(ctx, id, interpreter, base, baseLock) })
}

func (t tx) setBase(ctx context.Context, id, interpreter, base string, baseLock []byte) error {
	res, err := t.exec(ctx, `UPDATE sessions SET interpreter = ?, base = ?, base_lock = ? WHERE id = ?`,
		interpreter, base, baseLock, id)
	if err != nil {
		return fmt.Errorf("setting the base of session %q: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("setting the base of session %q: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("session %q: %w", id, broker.ErrNotFound)
	}
	return nil
}

// PutToken implements broker.Store.
func (s *Store) PutToken(ctx context.Context, tok broker.Token, audit ...broker.AuditEvent) error {
	return s.insertAudited(ctx, checkToken(tok), func(t tx) error { return t.insertToken(ctx, tok) }, audit)
}

func checkToken(tok broker.Token) error {
	switch tok.Role {
	case broker.RoleAdmin, broker.RoleOwner, broker.RoleAgent:
	default:
		return fmt.Errorf("storing token: %w: unknown role %q", broker.ErrInvalid, tok.Role)
	}
	if tok.Hash == "" || tok.Subject == "" {
		return fmt.Errorf("storing token: %w: Hash and Subject are required", broker.ErrInvalid)
	}
	if !plainKey(tok.Hash) {
		return fmt.Errorf("storing token: %w: the hash must be UTF-8 without NUL", broker.ErrInvalid)
	}
	return nil
}

func (t tx) insertToken(ctx context.Context, tok broker.Token) error {
	return t.insertNew(ctx, "storing token", "the hash exists", `INSERT INTO tokens (hash, role, subject, created)
		VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`, tok.Hash, tok.Role, tok.Subject, nanos(tok.Created))
}

// GetToken implements broker.Store.
func (s *Store) GetToken(ctx context.Context, hash string) (broker.Token, error) {
	tok, found, err := s.tokens.get(ctx, s, hash)
	if err != nil {
		return broker.Token{}, fmt.Errorf("reading token: %w", err)
	}
	if !found {
		return broker.Token{}, fmt.Errorf("token: %w", broker.ErrNotFound) // never echo the hash
	}
	return tok, nil
}

func scanToken(sc scanner) (broker.Token, error) {
	var tok broker.Token
	var created int64
	if err := sc.Scan(&tok.Hash, &tok.Role, &tok.Subject, &created); err != nil {
		return broker.Token{}, err
	}
	tok.Created = fromNanos(created)
	return tok, nil
}

// CheckWrite implements broker.WriteChecker with the dialect's check.
func (s *Store) CheckWrite(ctx context.Context) error {
	return s.inTx(ctx, func(t tx) error {
		x, err := t.raw()
		if err != nil {
			return err
		}
		if err := s.d.CheckWrite(t.ctx(ctx), x); err != nil {
			return fmt.Errorf("checking the store accepts writes: %w", err)
		}
		return nil
	})
}
