package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/internal/sqlstore"
)

// Store is a broker.Store in a PostgreSQL database.
type Store struct {
	*sqlstore.Store
	cfg *pgx.ConnConfig // for the change feed's dedicated connection (follow.go)
}

var (
	_ broker.Store        = (*Store)(nil)
	_ broker.WriteChecker = (*Store)(nil)
	_ broker.ChangeFeed   = (*Store)(nil)
)

// Option changes how Open connects.
type Option func(*options)

type options struct {
	wrap     func(driver.Connector) driver.Connector
	maxConns int
}

// WithConnector wraps the driver's connector, e.g. to inject faults in tests.
func WithConnector(wrap func(driver.Connector) driver.Connector) Option {
	return func(o *options) { o.wrap = wrap }
}

// writeConns is the connections of the transactions' pool: the group commit's two
// leaders (the clients' writes and the background's: sqlstore's Lanes) and one to spare.
const writeConns = 3

// WithMaxConns bounds the open connections of the reads' pool (default 16; the
// transactions have writeConns more, and the change feed one).
func WithMaxConns(n int) Option { return func(o *options) { o.maxConns = n } }

// IsURL reports whether dsn names a PostgreSQL database (postgres:// or postgresql://).
func IsURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// Redact returns dsn without its password, for logs and errors.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// Open connects to the database at dsn (postgres://user@host:port/db?sslmode=...; see
// libpq's connection URIs; a password is better kept in PGPASSWORD or ~/.pgpass than in
// the URL) and brings its schema up to date.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	o := options{maxConns: 16}
	for _, opt := range opts {
		opt(&o)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil { // pgx's message may quote the URL, password included
		return nil, fmt.Errorf("opening store %s: %w: not a PostgreSQL connection URL", Redact(dsn), broker.ErrInvalid)
	}
	c := stdlib.GetConnector(*cfg)
	if o.wrap != nil {
		c = o.wrap(c)
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(o.maxConns)
	db.SetMaxIdleConns(o.maxConns)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: %w (is PostgreSQL running there, and does the database exist?)", Redact(dsn), err)
	}
	// Transactions have connections of their own: each lane of the group commit runs one
	// batch at a time, and must not queue for a connection behind a burst of reads.
	w := sql.OpenDB(c)
	w.SetMaxOpenConns(writeConns)
	w.SetMaxIdleConns(writeConns)
	if err := warm(ctx, w, writeConns); err != nil {
		db.Close()
		w.Close()
		return nil, fmt.Errorf("opening store %s: %w", Redact(dsn), err)
	}
	s, err := sqlstore.NewSplit(ctx, db, w, dialect)
	if err != nil {
		db.Close()
		w.Close()
		return nil, fmt.Errorf("opening store %s: %w", Redact(dsn), err)
	}
	return &Store{Store: s, cfg: cfg}, nil
}

// warm opens n connections of db now, not in the first burst: a connection costs the
// server a process and the client the round trips of startup and authentication, and
// every write queued behind the group commit's first batch would wait for them.
func warm(ctx context.Context, db *sql.DB, n int) error {
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		if err := c.PingContext(ctx); err != nil {
			return err
		}
	}
	return nil
}

// migrationLock is the pg_advisory_xact_lock key that serialises migrations.
const migrationLock = 0x70796c61 // "pyla"

var dialect = &sqlstore.Dialect{
	Numbered:       true,
	ForUpdate:      " FOR UPDATE",
	SkipLocked:     " FOR UPDATE SKIP LOCKED",
	Migrations:     migrations,
	LockMigrations: fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d)`, migrationLock),
	CheckWrite:     checkWrite,
	Notify:         `SELECT pg_notify('` + channel + `', p) FROM unnest(?::text[]) AS p`,
	GroupCommit:    true,
	Lanes:          true,
	ReadBatches:    readBatches,
	InList:         `= ANY(?::text[])`,
	ListArg:        func(keys []string) any { return keys },
	Arrays:         true,
	ClassifyMany: `WITH u AS (UPDATE requests AS r SET state = v.state, decision = v.decision, reasons = v.reasons,
			isolated = v.isolated, packages = v.packages, lock_key = v.lock_key, digest = v.digest, error = v.error,
			updated = v.updated
		FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::bigint[], ?::text[], ?::text[],
			?::text[], ?::text[], ?::bigint[])
			AS v (id, session_id, state, decision, reasons, isolated, packages, lock_key, digest, error, updated)
		WHERE r.id = v.id AND r.session_id = v.session_id AND r.state = 'classifying'
		RETURNING 1)
		SELECT expect_rows((SELECT count(*) FROM u), ?, 'classifying a batch of requests')`,
	Pipeline: pipeline,
}

// readBatches is how many coalesced reads of a kind run at once (sqlstore's
// Dialect.ReadBatches): a few of the read pool's connections, so that a burst of one kind
// leaves the pool to the others and a lone read never waits.
const readBatches = 4

// checkWrite rewrites the newest schema_migrations row with its own values: PostgreSQL
// writes a new row version and commits it through the WAL like any change.
func checkWrite(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `UPDATE schema_migrations SET applied = applied
		WHERE version = (SELECT MAX(version) FROM schema_migrations)`)
	return err
}

// SchemaVersion is the schema version this package writes.
var SchemaVersion = len(migrations)

// pipeline implements sqlstore's Dialect.Pipeline with a pgx batch: every statement goes
// in one write and the server answers them all at once. pgx ends a batch with a single
// Sync, so the server runs the statements as one implicit transaction: an error in one
// rolls back those before it and skips those after.
func pipeline(ctx context.Context, db *sql.DB, stmts []sqlstore.Stmt) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("%w: a %T, not a pgx connection", sqlstore.ErrNoPipeline, dc)
		}
		b := &pgx.Batch{}
		for _, st := range stmts {
			b.Queue(st.Query, st.Args...)
		}
		br := c.Conn().SendBatch(ctx, b)
		for range stmts {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return err
			}
		}
		return br.Close()
	})
}
