package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	_ "modernc.org/sqlite"
)

func openGrouped(t *testing.T) *Store {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "g.db") + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), db, &Dialect{GroupCommit: true, Prepare: true,
		Migrations: []string{`CREATE TABLE kv (k INTEGER PRIMARY KEY, v TEXT NOT NULL)`}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestGroupCommitIsolatesFailures: writes committed together still succeed or fail one by
// one. A write that fails after changing a row is rolled back with its batch, which then
// runs again one write at a time, and its caller alone gets its error; the others' rows
// are there.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	s := openGrouped(t)
	ctx := context.Background()
	const n = 200
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.inTx(ctx, func(t tx) error {
				if _, err := t.exec(ctx, `INSERT INTO kv (k, v) VALUES (?, ?)`, i, "x"); err != nil {
					return err
				}
				if i%3 == 0 { // change, then fail: nothing of it may stay
					if _, err := t.exec(ctx, `UPDATE kv SET v = 'changed'`); err != nil {
						return err
					}
					return fmt.Errorf("write %d fails on purpose", i)
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if (i%3 == 0) != (err != nil) {
			t.Errorf("write %d: err %v", i, err)
		}
	}
	var rows, changed int
	if err := s.queryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(v = 'changed'), 0) FROM kv`).Scan(&rows, &changed); err != nil {
		t.Fatal(err)
	}
	if want := n - (n+2)/3; rows != want || changed != 0 {
		t.Errorf("%d rows, %d changed; want %d rows, none changed", rows, changed, want)
	}
	if b := s.group.batches.Load(); b >= n {
		t.Errorf("%d writes took %d commits: nothing was grouped", n, b)
	}
	if r := s.group.retries.Load(); r == 0 {
		t.Error("failed writes in batches, yet no batch ran again one write at a time")
	}
}

// TestGroupCommitCancelled: a write whose context ends before its turn is not made.
func TestGroupCommitCancelled(t *testing.T) {
	s := openGrouped(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.inTx(ctx, func(t tx) error {
		_, err := t.exec(ctx, `INSERT INTO kv (k, v) VALUES (1, 'x')`)
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	var rows int
	if err := s.queryRow(context.Background(), `SELECT COUNT(*) FROM kv`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("%d rows (%v), want none", rows, err)
	}
}
