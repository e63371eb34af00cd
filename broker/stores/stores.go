// Package stores opens the broker.Store a --db value names, so that commands need not
// know the store packages: a postgres:// or postgresql:// URL is a PostgreSQL database
// (broker/postgres), anything else the path of an SQLite file (broker/sqlite), the
// embedded default.
//
// It is the one place that imports the concrete stores; broker itself must never.
package stores

import (
	"context"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/postgres"
	"github.com/pylayer/pylayer/broker/sqlite"
)

// Open opens the store dsn names and brings its schema up to date.
func Open(ctx context.Context, dsn string) (broker.Store, error) {
	if postgres.IsURL(dsn) {
		return postgres.Open(ctx, dsn)
	}
	return sqlite.Open(ctx, dsn)
}

// LocalPath reports whether dsn is an SQLite file path (a directory beside it can hold
// the broker's other data) rather than a database server's URL.
func LocalPath(dsn string) bool { return !postgres.IsURL(dsn) }

// Redact returns dsn fit for a log line: a URL without its password, a path as it is.
func Redact(dsn string) string {
	if postgres.IsURL(dsn) {
		return postgres.Redact(dsn)
	}
	return dsn
}
