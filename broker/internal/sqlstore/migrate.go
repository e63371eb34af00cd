package sqlstore

import (
	"context"
	"fmt"
	"time"
)

// migrate applies the missing migrations in one transaction, after the dialect's lock.
func (s *Store) migrate(ctx context.Context) error {
	return s.inTx(ctx, func(t tx) error {
		if s.d.LockMigrations != "" {
			if _, err := t.exec(ctx, s.d.LockMigrations); err != nil {
				return fmt.Errorf("locking the schema for migration: %w", err)
			}
		}
		if _, err := t.exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER PRIMARY KEY,
			applied BIGINT NOT NULL
		)`); err != nil {
			return fmt.Errorf("creating schema_migrations: %w", err)
		}
		var have int
		if err := t.queryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
			return fmt.Errorf("reading schema version: %w", err)
		}
		if have > len(s.d.Migrations) {
			return fmt.Errorf("database schema version %d is newer than this pylayer knows (%d): upgrade pylayer", have, len(s.d.Migrations))
		}
		for v := have + 1; v <= len(s.d.Migrations); v++ {
			x, err := t.raw()
			if err != nil {
				return err
			}
			if _, err := x.ExecContext(t.ctx(ctx), s.d.Migrations[v-1]); err != nil {
				return fmt.Errorf("applying migration %d: %w", v, err)
			}
			if _, err := t.exec(ctx, `INSERT INTO schema_migrations (version, applied) VALUES (?, ?)`, v, time.Now().UnixNano()); err != nil {
				return fmt.Errorf("recording migration %d: %w", v, err)
			}
		}
		return nil
	})
}
