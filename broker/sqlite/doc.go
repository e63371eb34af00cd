// Package sqlite is the default broker.Store: one SQLite file (pure Go, modernc.org/sqlite,
// no cgo) in WAL mode with a busy timeout, its schema applied by numbered migrations
// recorded in schema_migrations. The audit table is append-only, enforced by triggers.
//
// Its SQL is broker/internal/sqlstore's, shared with broker/postgres; this package holds
// SQLite's schema and connection settings. BEGIN IMMEDIATE (_txlock=immediate) takes the
// write lock at the start of every transaction, so read-modify-write needs no row locks.
// It must never import net/http or anything above broker: it is storage only.
package sqlite
