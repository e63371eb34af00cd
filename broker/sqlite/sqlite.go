package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pylayer/pylayer/broker"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// BusyTimeout is how long a writer waits for the database lock before failing.
const BusyTimeout = 10 * time.Second

// Store is a broker.Store in one SQLite file.
type Store struct {
	db *sql.DB
}

var _ broker.Store = (*Store)(nil)

// Open opens (creating if needed) the database at path and brings its schema up to date.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#%\x00") {
		return nil, fmt.Errorf("opening store %q: %w: the path must be non-empty and free of '?', '#', '%%' and NUL", path, broker.ErrInvalid)
	}
	// _txlock=immediate takes the write lock at BEGIN, so read-then-write transactions
	// never fail with SQLITE_BUSY on lock upgrade; busy_timeout makes writers queue.
	dsn := fmt.Sprintf("file:%s?_txlock=immediate&_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)"+
		"&_pragma=foreign_keys(1)&_pragma=synchronous(FULL)", path, BusyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// DB gives the underlying database, for backups and for tests that check the triggers.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

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

// inTx runs fn in a write transaction and commits it unless fn fails.
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("starting transaction: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func exists(ctx context.Context, q queryer, query string, args ...any) (bool, error) {
	var one int
	err := q.QueryRowContext(ctx, query, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func sessionExists(ctx context.Context, q queryer, id string) error {
	ok, err := exists(ctx, q, `SELECT 1 FROM sessions WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("looking up session %q: %w", id, err)
	}
	if !ok {
		return fmt.Errorf("session %q: %w", id, broker.ErrNotFound)
	}
	return nil
}

// CreateSession implements broker.Store.
func (s *Store) CreateSession(ctx context.Context, se broker.Session) error {
	if se.ID == "" || se.Owner == "" {
		return fmt.Errorf("creating session: %w: ID and Owner are required", broker.ErrInvalid)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if ok, err := exists(ctx, tx, `SELECT 1 FROM sessions WHERE id = ?`, se.ID); err != nil {
			return fmt.Errorf("creating session %q: %w", se.ID, err)
		} else if ok {
			return fmt.Errorf("creating session %q: %w: it exists", se.ID, broker.ErrConflict)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO sessions (id, owner, created, interpreter, base, base_lock)
			VALUES (?, ?, ?, ?, ?, ?)`, se.ID, se.Owner, nanos(se.Created), se.Interpreter, se.Base, se.BaseLock)
		if err != nil {
			return fmt.Errorf("creating session %q: %w", se.ID, err)
		}
		return nil
	})
}

const sessionCols = `id, owner, created, interpreter, base, base_lock`

func scanSession(sc interface{ Scan(...any) error }) (broker.Session, error) {
	var se broker.Session
	var created int64
	if err := sc.Scan(&se.ID, &se.Owner, &created, &se.Interpreter, &se.Base, &se.BaseLock); err != nil {
		return se, err
	}
	se.Created = fromNanos(created)
	return se, nil
}

// GetSession implements broker.Store.
func (s *Store) GetSession(ctx context.Context, id string) (broker.Session, error) {
	se, err := scanSession(s.db.QueryRowContext(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return se, fmt.Errorf("session %q: %w", id, broker.ErrNotFound)
	}
	if err != nil {
		return se, fmt.Errorf("reading session %q: %w", id, err)
	}
	return se, nil
}

// ListSessions implements broker.Store.
func (s *Store) ListSessions(ctx context.Context, owner string) ([]broker.Session, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+sessionCols+` FROM sessions
		WHERE (? = '' OR owner = ?) ORDER BY created, id`, owner, owner)
	if err != nil {
		return nil, fmt.Errorf("listing sessions: %w", err)
	}
	return collect(rows, "listing sessions", scanSession)
}

// collect scans every row with scan and closes rows; errors say what was being listed.
func collect[T any](rows *sql.Rows, what string, scan func(sc interface{ Scan(...any) error }) (T, error)) ([]T, error) {
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
	res, err := s.db.ExecContext(ctx, `UPDATE sessions SET interpreter = ?, base = ?, base_lock = ? WHERE id = ?`,
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
func (s *Store) PutToken(ctx context.Context, t broker.Token) error {
	switch t.Role {
	case broker.RoleAdmin, broker.RoleOwner, broker.RoleAgent:
	default:
		return fmt.Errorf("storing token: %w: unknown role %q", broker.ErrInvalid, t.Role)
	}
	if t.Hash == "" || t.Subject == "" {
		return fmt.Errorf("storing token: %w: Hash and Subject are required", broker.ErrInvalid)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if ok, err := exists(ctx, tx, `SELECT 1 FROM tokens WHERE hash = ?`, t.Hash); err != nil {
			return fmt.Errorf("storing token: %w", err)
		} else if ok {
			return fmt.Errorf("storing token: %w: the hash exists", broker.ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO tokens (hash, role, subject, created) VALUES (?, ?, ?, ?)`,
			t.Hash, t.Role, t.Subject, nanos(t.Created)); err != nil {
			return fmt.Errorf("storing token: %w", err)
		}
		return nil
	})
}

// GetToken implements broker.Store.
func (s *Store) GetToken(ctx context.Context, hash string) (broker.Token, error) {
	t := broker.Token{Hash: hash}
	var created int64
	err := s.db.QueryRowContext(ctx, `SELECT role, subject, created FROM tokens WHERE hash = ?`, hash).
		Scan(&t.Role, &t.Subject, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return broker.Token{}, fmt.Errorf("token: %w", broker.ErrNotFound) // never echo the hash
	}
	if err != nil {
		return broker.Token{}, fmt.Errorf("reading token: %w", err)
	}
	t.Created = fromNanos(created)
	return t, nil
}

var _ broker.WriteChecker = (*Store)(nil)

// CheckWrite implements broker.WriteChecker: a write transaction that sets the database
// header's user_version to the value it has, which SQLite writes through the journal and
// syncs like any change (an UPDATE to the same value would be skipped). Nothing changes.
func (s *Store) CheckWrite(ctx context.Context) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		var v int64
		if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
			return fmt.Errorf("checking the store accepts writes: %w", err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, v)); err != nil {
			return fmt.Errorf("checking the store accepts writes: %w", err)
		}
		return nil
	})
}
