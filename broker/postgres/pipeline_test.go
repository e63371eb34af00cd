package postgres

import (
	"context"
	"testing"

	"github.com/pylayer/pylayer/broker/internal/sqlstore"
	"github.com/pylayer/pylayer/broker/postgres/pgtest"
)

// TestPipelineAllOrNothing: the statements of a pipeline commit together or not at all,
// whichever of them fails: a refused insert, or expect_rows finding a shortfall.
func TestPipelineAllOrNothing(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := s.DB()
	ins := func(id string) sqlstore.Stmt {
		return sqlstore.Stmt{Query: `INSERT INTO sessions (id, owner, created, interpreter, base, base_lock) VALUES ($1, 'o', 0, '', '', '')`, Args: []any{id}}
	}
	count := func() (n int) {
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sessions`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := pipeline(ctx, db, []sqlstore.Stmt{ins("a"), ins("b")}); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d sessions after a pipeline of two inserts, want 2", n)
	}
	for name, stmts := range map[string][]sqlstore.Stmt{
		"a duplicate last":   {ins("c"), ins("d"), ins("a")},
		"a duplicate first":  {ins("b"), ins("e")},
		"a shortfall":        {ins("f"), {Query: `SELECT expect_rows(0, 1, 'test')`}, ins("g")},
		"a shortfall at end": {ins("h"), {Query: `SELECT expect_rows((SELECT count(*) FROM sessions WHERE id = 'zz'), 1, 'test')`}},
	} {
		if err := pipeline(ctx, db, stmts); err == nil {
			t.Errorf("%s: the pipeline succeeded", name)
		}
		if n := count(); n != 2 {
			t.Errorf("%s: %d sessions after a failed pipeline, want the 2 before it", name, n)
		}
	}
	// The connection goes back to the pool clean: the next statement on it works.
	if err := pipeline(ctx, db, []sqlstore.Stmt{ins("i")}); err != nil || count() != 3 {
		t.Errorf("after the failures: %v, %d sessions", err, count())
	}
}
