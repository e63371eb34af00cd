package postgres_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/postgres"
	"github.com/pylayer/pylayer/broker/postgres/pgtest"
	"github.com/pylayer/pylayer/broker/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func open(t *testing.T, dsn string, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	pgtest.Shared(t)
	storetest.Run(t, func() broker.Store { return open(t, pgtest.DSN(t)) })
}

func TestMigrate(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := open(t, dsn)
	if err := s.CreateSession(ctx, broker.Session{ID: "s1", Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// Replicas starting at once: every one opens, the schema is applied once.
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			s, err := postgres.Open(ctx, dsn)
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent open: %v", err)
		}
	}
	s = open(t, dsn)
	defer s.Close()
	if _, err := s.GetSession(ctx, "s1"); err != nil {
		t.Errorf("after reopen: %v", err)
	}
	var n, max int
	if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if n != postgres.SchemaVersion || max != postgres.SchemaVersion {
		t.Errorf("schema_migrations: %d rows, max %d; want %d", n, max, postgres.SchemaVersion)
	}
	if _, err := s.DB().ExecContext(ctx, `TRUNCATE audit`); err == nil {
		t.Error("TRUNCATE audit succeeded; the audit table must refuse it")
	}
	if err := s.CheckWrite(ctx); err != nil {
		t.Errorf("CheckWrite: %v", err)
	}
	// A database from a newer pylayer is refused, not modified.
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO schema_migrations (version, applied) VALUES (999, 0)`); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Open(ctx, dsn); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("opening a newer schema: err = %v, want one naming the newer version", err)
	}
}

func TestAtomic(t *testing.T) {
	pgtest.Shared(t)
	storetest.RunFaults(t, func(f *storetest.Faults) broker.Store {
		return open(t, pgtest.DSN(t), postgres.WithConnector(f.Wrap))
	})
}

func TestOpenRefuses(t *testing.T) {
	ctx := context.Background()
	if _, err := postgres.Open(ctx, "postgres://u:hunter2@127.0.0.1:1/x?sslmode=disable&connect_timeout=5"); err == nil {
		t.Error("Open of a closed port succeeded")
	} else if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("the error shows the password: %v", err)
	}
	if _, err := postgres.Open(ctx, "postgres://u:hunter2@[::1"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Open of a bad URL: %v", err)
	}
	if got := postgres.Redact("postgres://u:hunter2@h/db?password=x"); strings.Contains(got, "hunter2") || strings.HasSuffix(got, "=x") {
		t.Errorf("Redact = %s", got)
	}
}

var _ storetest.SQLStore = (*postgres.Store)(nil)
