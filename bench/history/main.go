// Command history measures the broker's list latency at scale on both stores: it
// bulk-loads sessions, requests and audit events straight into the tables (multi-row
// INSERTs on SQLite, COPY on PostgreSQL; not through the API), then times the first page
// and a later page of each list and filter through the Store, and prints a table (median
// of -runs). It is not part of make test.
//
//	go run ./bench/history                       # 100,000 sessions, 1,000,000 events
//	go run ./bench/history -sessions 1000 -events 10000 -pg postgres://...
//
// Without -pg it starts a throwaway PostgreSQL cluster (broker/postgres/pgtest).
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/postgres"
	"github.com/pylayer/pylayer/broker/postgres/pgtest"
	"github.com/pylayer/pylayer/broker/sqlite"
)

type config struct {
	sessions, requests, events, owners, limit, runs int
	pg, only, keep                                  string
}

func main() {
	var c config
	flag.IntVar(&c.sessions, "sessions", 100_000, "sessions to load")
	flag.IntVar(&c.requests, "requests", 100_000, "requests to load (spread over the sessions)")
	flag.IntVar(&c.events, "events", 1_000_000, "audit events to load")
	flag.IntVar(&c.owners, "owners", 1000, "owners the sessions are spread over")
	flag.IntVar(&c.limit, "limit", broker.DefaultPageLimit, "page size")
	flag.IntVar(&c.runs, "runs", 5, "timed runs of each query (the median is printed)")
	flag.StringVar(&c.pg, "pg", "", "PostgreSQL URL of an empty database (default: start a throwaway cluster)")
	flag.StringVar(&c.only, "store", "", "sqlite or postgres (default: both)")
	flag.StringVar(&c.keep, "keep", "", "write the SQLite database into this directory and keep it (for EXPLAIN)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "history:", err)
		os.Exit(1)
	}
}

// loadable is a store whose tables the loader writes to directly.
type loadable interface {
	broker.Store
	DB() *sql.DB
}

func run(ctx context.Context, c config) error {
	fmt.Printf("# %d sessions (%d owners), %d requests, %d audit events; pages of %d; median of %d runs\n",
		c.sessions, c.owners, c.requests, c.events, c.limit, c.runs)
	if c.only == "" || c.only == "sqlite" {
		dir := c.keep
		if dir == "" {
			tmp, err := os.MkdirTemp("", "history-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			dir = tmp
		}
		st, err := sqlite.Open(ctx, filepath.Join(dir, "broker.db"))
		if err != nil {
			return err
		}
		err = bench(ctx, c, "sqlite", st, sqliteLoader{st.DB()})
		st.Close()
		if err != nil {
			return fmt.Errorf("sqlite: %w", err)
		}
	}
	if c.only == "" || c.only == "postgres" {
		dsn := c.pg
		if dsn == "" {
			srv, err := pgtest.Start(ctx)
			if err != nil {
				return fmt.Errorf("starting PostgreSQL (or pass -pg URL): %w", err)
			}
			defer srv.Stop()
			if dsn, err = srv.CreateDatabase(ctx); err != nil {
				return err
			}
		}
		st, err := postgres.Open(ctx, dsn)
		if err != nil {
			return err
		}
		err = bench(ctx, c, "postgres", st, pgLoader{st.DB()})
		st.Close()
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	return nil
}

// t0 is the first session's creation; row i of each table is i seconds (sessions,
// requests) or i/10 seconds (events) after it.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func sessionID(i int) string { return fmt.Sprintf("ses_%07d", i) }
func requestID(i int) string { return fmt.Sprintf("req_%07d", i) }
func owner(c config, i int) string {
	return fmt.Sprintf("user%04d", i%c.owners)
}

var actions = []string{"request.create", "approve", "deny", "build", "bind", "session.create"}
var states = []broker.State{broker.StateBound, broker.StateBound, broker.StateBound, broker.StatePending, broker.StateFailed}

// loader writes rows of one table in bulk.
type loader interface {
	load(ctx context.Context, table string, cols []string, n int, row func(i int) []any) error
	analyze(ctx context.Context) error
}

func bench(ctx context.Context, c config, name string, st loadable, l loader) error {
	start := time.Now()
	if err := l.load(ctx, "sessions", []string{"id", "owner", "created", "interpreter", "base", "base_lock"}, c.sessions, func(i int) []any {
		return []any{sessionID(i), owner(c, i), t0.Add(time.Duration(i) * time.Second).UnixNano(), "", "", []byte(nil)}
	}); err != nil {
		return err
	}
	if err := l.load(ctx, "requests", []string{"id", "session_id", "specs", "upload", "state", "decision", "reasons",
		"isolated", "packages", "lock_key", "digest", "error", "approver", "created", "updated"}, c.requests, func(i int) []any {
		at := t0.Add(time.Duration(i) * time.Second).UnixNano()
		return []any{requestID(i), sessionID(i % c.sessions), `["numpy==2.1.0"]`, "", string(states[i%len(states)]), "approved",
			`["allowlisted"]`, 0, `[{"name":"numpy","version":"2.1.0"}]`, "", "", "", "alice", at, at}
	}); err != nil {
		return err
	}
	if err := l.load(ctx, "audit", []string{"time", "actor", "action", "session_id", "request_id", "packages", "decision", "detail"}, c.events, func(i int) []any {
		return []any{t0.Add(time.Duration(i) * 100 * time.Millisecond).UnixNano(), "alice", actions[i%len(actions)],
			sessionID((i * 7919) % c.sessions), requestID(i % max(c.requests, 1)), `[]`, "", "isolated=false"}
	}); err != nil {
		return err
	}
	if err := l.analyze(ctx); err != nil {
		return err
	}
	fmt.Printf("\n## %s (loaded in %s)\n\n| list | first page | later page |\n|---|---|---|\n", name, time.Since(start).Round(time.Millisecond))

	sesMid := broker.Key{Time: t0.Add(time.Duration(c.sessions/2) * time.Second), ID: sessionID(c.sessions / 2)}
	reqMid := broker.Key{Time: t0.Add(time.Duration(c.requests/2) * time.Second), ID: requestID(c.requests / 2)}
	evMid := int64(c.events / 2)
	lastHour := t0.Add(time.Duration(c.events) * 100 * time.Millisecond).Add(-time.Hour)
	cases := []struct {
		what         string
		first, later func() (int, error)
	}{
		{"sessions",
			func() (int, error) { return n(st.Sessions(ctx, broker.SessionFilter{Limit: c.limit})) },
			func() (int, error) { return n(st.Sessions(ctx, broker.SessionFilter{After: sesMid, Limit: c.limit})) }},
		{"sessions, newest first",
			func() (int, error) { return n(st.Sessions(ctx, broker.SessionFilter{Desc: true, Limit: c.limit})) },
			func() (int, error) {
				return n(st.Sessions(ctx, broker.SessionFilter{Desc: true, After: sesMid, Limit: c.limit}))
			}},
		{"sessions of one owner",
			func() (int, error) {
				return n(st.Sessions(ctx, broker.SessionFilter{Owner: owner(c, 7), Limit: c.limit}))
			},
			func() (int, error) {
				return n(st.Sessions(ctx, broker.SessionFilter{Owner: owner(c, 7), After: sesMid, Limit: c.limit}))
			}},
		{"requests",
			func() (int, error) { return n(st.ListRequests(ctx, broker.RequestFilter{Limit: c.limit})) },
			func() (int, error) {
				return n(st.ListRequests(ctx, broker.RequestFilter{After: reqMid, Limit: c.limit}))
			}},
		{"requests pending",
			func() (int, error) {
				return n(st.ListRequests(ctx, broker.RequestFilter{State: broker.StatePending, Limit: c.limit}))
			},
			func() (int, error) {
				return n(st.ListRequests(ctx, broker.RequestFilter{State: broker.StatePending, After: reqMid, Limit: c.limit}))
			}},
		{"requests of one owner",
			func() (int, error) {
				return n(st.ListRequests(ctx, broker.RequestFilter{Owner: owner(c, 7), Limit: c.limit}))
			},
			func() (int, error) {
				return n(st.ListRequests(ctx, broker.RequestFilter{Owner: owner(c, 7), After: reqMid, Limit: c.limit}))
			}},
		{"requests of one session",
			func() (int, error) {
				return n(st.ListRequests(ctx, broker.RequestFilter{SessionID: sessionID(7), Limit: c.limit}))
			},
			nil},
		{"requests updated in the last hour",
			func() (int, error) {
				return n(st.ListRequests(ctx, broker.RequestFilter{UpdatedSince: t0.Add(time.Duration(c.requests-3600) * time.Second), Limit: c.limit}))
			}, nil},
		{"audit",
			func() (int, error) { return n(st.AuditEvents(ctx, broker.AuditFilter{Limit: c.limit})) },
			func() (int, error) { return n(st.AuditEvents(ctx, broker.AuditFilter{AfterID: evMid, Limit: c.limit})) }},
		{"audit, newest first",
			func() (int, error) { return n(st.AuditEvents(ctx, broker.AuditFilter{Desc: true, Limit: c.limit})) },
			func() (int, error) {
				return n(st.AuditEvents(ctx, broker.AuditFilter{Desc: true, AfterID: evMid, Limit: c.limit}))
			}},
		{"audit of one action",
			func() (int, error) { return n(st.AuditEvents(ctx, broker.AuditFilter{Action: "deny", Limit: c.limit})) },
			func() (int, error) {
				return n(st.AuditEvents(ctx, broker.AuditFilter{Action: "deny", AfterID: evMid, Limit: c.limit}))
			}},
		{"audit of one session",
			func() (int, error) {
				return n(st.AuditEvents(ctx, broker.AuditFilter{SessionID: sessionID(7), Limit: c.limit}))
			},
			nil},
		{"audit of one owner's sessions",
			func() (int, error) {
				return n(st.AuditEvents(ctx, broker.AuditFilter{Owner: owner(c, 7), Limit: c.limit}))
			},
			func() (int, error) {
				return n(st.AuditEvents(ctx, broker.AuditFilter{Owner: owner(c, 7), AfterID: evMid, Limit: c.limit}))
			}},
		{"audit of the last hour",
			func() (int, error) {
				return n(st.AuditEvents(ctx, broker.AuditFilter{Since: lastHour, Limit: c.limit}))
			},
			nil},
	}
	for _, tc := range cases {
		first, rows, err := median(c.runs, tc.first)
		if err != nil {
			return fmt.Errorf("%s: %w", tc.what, err)
		}
		later := "-"
		if tc.later != nil {
			d, lrows, err := median(c.runs, tc.later)
			if err != nil {
				return fmt.Errorf("%s, later page: %w", tc.what, err)
			}
			later = fmt.Sprintf("%s (%d rows)", fmtDur(d), lrows)
		}
		fmt.Printf("| %s | %s (%d rows) | %s |\n", tc.what, fmtDur(first), rows, later)
	}
	// Retention: prune the older half of the log in one transaction (the delete trigger
	// checks every row against the horizon).
	start = time.Now()
	pruned, err := st.PruneAudit(ctx, t0.Add(time.Duration(c.events/2)*100*time.Millisecond),
		broker.AuditEvent{Time: time.Now(), Actor: "bench", Action: "audit.prune"})
	if err != nil {
		return fmt.Errorf("pruning: %w", err)
	}
	fmt.Printf("\nPruneAudit of the older half: %d events in %s\n", pruned, time.Since(start).Round(time.Millisecond))
	return nil
}

func n[T any](l []T, err error) (int, error) { return len(l), err }

func median(runs int, fn func() (int, error)) (time.Duration, int, error) {
	var ds []time.Duration
	rows := 0
	for range max(runs, 1) {
		start := time.Now()
		k, err := fn()
		if err != nil {
			return 0, 0, err
		}
		ds = append(ds, time.Since(start))
		rows = k
	}
	slices.Sort(ds)
	return ds[len(ds)/2], rows, nil
}

func fmtDur(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// sqliteLoader writes with multi-row INSERTs, 500 rows a statement, in one transaction.
type sqliteLoader struct{ db *sql.DB }

func (l sqliteLoader) load(ctx context.Context, table string, cols []string, n int, row func(int) []any) error {
	const batch = 500
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	one := "(" + strings.TrimSuffix(strings.Repeat("?,", len(cols)), ",") + ")"
	for i := 0; i < n; i += batch {
		k := min(batch, n-i)
		args := make([]any, 0, k*len(cols))
		for j := range k {
			args = append(args, row(i+j)...)
		}
		q := "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES " + strings.TrimSuffix(strings.Repeat(one+",", k), ",")
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("loading %s: %w", table, err)
		}
	}
	return tx.Commit()
}

func (l sqliteLoader) analyze(ctx context.Context) error {
	_, err := l.db.ExecContext(ctx, "ANALYZE")
	return err
}

// pgLoader writes with COPY.
type pgLoader struct{ db *sql.DB }

func (l pgLoader) load(ctx context.Context, table string, cols []string, n int, row func(int) []any) error {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		i := 0
		_, err := pc.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromFunc(func() ([]any, error) {
			if i == n {
				return nil, nil
			}
			i++
			return row(i - 1), nil
		}))
		if err != nil {
			return fmt.Errorf("loading %s: %w", table, err)
		}
		return nil
	})
}

func (l pgLoader) analyze(ctx context.Context) error {
	_, err := l.db.ExecContext(ctx, "VACUUM ANALYZE")
	return err
}
