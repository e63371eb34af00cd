package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"modernc.org/sqlite"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/internal/sqlstore"
)

// BusyTimeout is how long a writer waits for the database lock before failing.
const BusyTimeout = 10 * time.Second

// MaxConns is the most connections a Store holds open.
const MaxConns = 8

// Store is a broker.Store in one SQLite file.
type Store struct {
	*sqlstore.Store
}

var (
	_ broker.Store        = (*Store)(nil)
	_ broker.WriteChecker = (*Store)(nil)
)

// Option changes how Open connects.
type Option func(*options)

type options struct {
	wrap func(driver.Connector) driver.Connector
}

// WithConnector wraps the driver's connector, e.g. to inject faults in tests.
func WithConnector(wrap func(driver.Connector) driver.Connector) Option {
	return func(o *options) { o.wrap = wrap }
}

// connector opens SQLite connections to one DSN.
type connector struct {
	drv driver.Driver
	dsn string
}

func (c connector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c connector) Driver() driver.Driver                        { return c.drv }

// Open opens (creating if needed) the database at path and brings its schema up to date.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if path == "" || strings.ContainsAny(path, "?#%\x00") {
		return nil, fmt.Errorf("opening store %q: %w: the path must be non-empty and free of '?', '#', '%%' and NUL", path, broker.ErrInvalid)
	}
	// _txlock=immediate takes the write lock at BEGIN, so read-then-write transactions
	// never fail with SQLITE_BUSY on lock upgrade; busy_timeout makes writers queue.
	dsn := fmt.Sprintf("file:%s?_txlock=immediate&_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)"+
		"&_pragma=foreign_keys(1)&_pragma=synchronous(FULL)", path, BusyTimeout.Milliseconds())
	var c driver.Connector = connector{drv: &sqlite.Driver{}, dsn: dsn}
	if o.wrap != nil {
		c = o.wrap(c)
	}
	db := sql.OpenDB(c)
	// Connections are kept: a new one parses the schema on its first statement, which
	// under a burst cost more than the statements themselves. Readers beyond a few per
	// core only queue inside SQLite; writers take one connection at a time (GroupCommit).
	db.SetMaxOpenConns(MaxConns)
	db.SetMaxIdleConns(MaxConns)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	s, err := sqlstore.New(ctx, db, dialect)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	return &Store{s}, nil
}

// dialect is SQLite's: '?' placeholders; no row locks, since BEGIN IMMEDIATE takes the
// database's write lock and writers run one at a time.
var dialect = &sqlstore.Dialect{
	Migrations:  migrations,
	CheckWrite:  checkWrite,
	Prepare:     true,
	GroupCommit: true,
	ReadBatches: 2,
	InList:      `IN (SELECT value FROM json_each(?))`,
	ListArg: func(keys []string) any {
		b, _ := json.Marshal(keys) // strings always marshal
		return string(b)
	},
}

// checkWrite sets the database header's user_version to the value it has, which SQLite
// writes through the journal and syncs like any change (an UPDATE to the same value
// would be skipped). Nothing changes.
func checkWrite(ctx context.Context, tx *sql.Tx) error {
	var v int64
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, v))
	return err
}
