// Package sqlite is the default broker.Store: one SQLite file (pure Go, modernc.org/sqlite,
// no cgo) in WAL mode with a busy timeout, its schema applied by numbered migrations
// recorded in schema_migrations. The audit table is append-only, enforced by triggers.
//
// The SQL avoids SQLite-only features where that is cheap (BIGINT nanosecond times, JSON
// text columns, existence checks inside transactions instead of parsing driver errors) so
// that a PostgreSQL store can share it later. It must never import net/http or anything
// above broker: it is storage only.
package sqlite
