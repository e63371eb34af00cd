package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/sqlite"
	"github.com/pylayer/pylayer/broker/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func() broker.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "broker.db"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestAtomic(t *testing.T) {
	storetest.RunFaults(t, func(f *storetest.Faults) broker.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "broker.db"), sqlite.WithConnector(f.Wrap))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "b.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := s.DB().QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	var busy int
	if err := s.DB().QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil || busy <= 0 {
		t.Errorf("busy_timeout = %d, %v; want > 0", busy, err)
	}
	if err := s.CreateSession(ctx, broker.Session{ID: "s1", Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// Reopening applies nothing twice and keeps the data.
	s, err = sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSession(ctx, "s1"); err != nil {
		t.Errorf("after reopen: %v", err)
	}
	var n, max int
	if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if n != sqlite.SchemaVersion || max != sqlite.SchemaVersion {
		t.Errorf("schema_migrations: %d rows, max %d; want %d", n, max, sqlite.SchemaVersion)
	}
	// A database from a newer pylayer is refused, not modified.
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO schema_migrations (version, applied) VALUES (999, 0)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := sqlite.Open(ctx, path); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("opening a newer schema: err = %v, want one naming the newer version", err)
	}
}

func TestOpenRefuses(t *testing.T) {
	for _, p := range []string{"", "a?mode=memory", "a#b", "a%20b"} {
		if _, err := sqlite.Open(context.Background(), p); err == nil {
			t.Errorf("Open(%q) succeeded", p)
		}
	}
}

var _ storetest.SQLStore = (*sqlite.Store)(nil)
var _ = sql.ErrNoRows
