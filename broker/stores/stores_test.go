package stores_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/postgres"
	"github.com/pylayer/pylayer/broker/postgres/pgtest"
	"github.com/pylayer/pylayer/broker/sqlite"
	"github.com/pylayer/pylayer/broker/stores"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestOpenSQLite(t *testing.T) {
	s, err := stores.Open(context.Background(), filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*sqlite.Store); !ok {
		t.Errorf("a path opened %T, want *sqlite.Store", s)
	}
}

func TestOpenPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	s, err := stores.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*postgres.Store); !ok {
		t.Errorf("%s opened %T, want *postgres.Store", dsn, s)
	}
	if err := s.CreateSession(context.Background(), broker.Session{ID: "s", Owner: "o"}); err != nil {
		t.Error(err)
	}
	if stores.LocalPath(dsn) {
		t.Errorf("LocalPath(%s) = true", dsn)
	}
}
