package storetest

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
)

// ErrInjected is the error a Faults connector returns for a statement it fails.
var ErrInjected = errors.New("storetest: injected failure")

// Faults fails chosen statements of a database/sql store at the driver, as a database
// that refuses a write half-way through a transaction would: wrap the store's connector
// with Wrap, then FailOn the statements a case needs to fail.
type Faults struct {
	mu   sync.Mutex
	subs []string
}

// FailOn makes every statement containing one of subs (compared without case or runs of
// white space) fail with ErrInjected, until Clear.
func (f *Faults) FailOn(subs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range subs {
		f.subs = append(f.subs, squash(s))
	}
}

// Clear lets every statement through again.
func (f *Faults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs = nil
}

func squash(s string) string { return strings.ToLower(strings.Join(strings.Fields(s), " ")) }

func (f *Faults) check(query string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := squash(query)
	for _, s := range f.subs {
		if strings.Contains(q, s) {
			return ErrInjected
		}
	}
	return nil
}

// Wrap returns c with f's faults: pass it to the store's connector option.
func (f *Faults) Wrap(c driver.Connector) driver.Connector { return faultConnector{c, f} }

type faultConnector struct {
	c driver.Connector
	f *Faults
}

func (c faultConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.c.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &faultConn{conn, c.f}, nil
}

func (c faultConnector) Driver() driver.Driver { return c.c.Driver() }

// faultConn passes everything to the driver's connection, checking statements first.
type faultConn struct {
	driver.Conn
	f *Faults
}

var (
	_ driver.ExecerContext      = (*faultConn)(nil)
	_ driver.QueryerContext     = (*faultConn)(nil)
	_ driver.ConnBeginTx        = (*faultConn)(nil)
	_ driver.ConnPrepareContext = (*faultConn)(nil)
	_ driver.SessionResetter    = (*faultConn)(nil)
	_ driver.Validator          = (*faultConn)(nil)
	_ driver.NamedValueChecker  = (*faultConn)(nil)
	_ driver.Pinger             = (*faultConn)(nil)
)

func (c *faultConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.f.check(query); err != nil {
		return nil, err
	}
	if e, ok := c.Conn.(driver.ExecerContext); ok {
		return e.ExecContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

func (c *faultConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.f.check(query); err != nil {
		return nil, err
	}
	if q, ok := c.Conn.(driver.QueryerContext); ok {
		return q.QueryContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

func (c *faultConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := c.f.check(query); err != nil {
		return nil, err
	}
	var st driver.Stmt
	var err error
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		st, err = p.PrepareContext(ctx, query)
	} else {
		st, err = c.Conn.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	return &faultStmt{Stmt: st, f: c.f, query: query}, nil
}

// faultStmt is a prepared statement that fails when its query matches at the time it
// runs, not only when it was prepared: a store keeps its statements prepared.
type faultStmt struct {
	driver.Stmt
	f     *Faults
	query string
}

func (s *faultStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if err := s.f.check(s.query); err != nil {
		return nil, err
	}
	if e, ok := s.Stmt.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	return s.Stmt.Exec(values(args)) //nolint:staticcheck // the driver has nothing newer
}

func (s *faultStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if err := s.f.check(s.query); err != nil {
		return nil, err
	}
	if q, ok := s.Stmt.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	return s.Stmt.Query(values(args)) //nolint:staticcheck // the driver has nothing newer
}

func values(args []driver.NamedValue) []driver.Value {
	vs := make([]driver.Value, len(args))
	for i, a := range args {
		vs[i] = a.Value
	}
	return vs
}

func (c *faultConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	return c.Conn.Begin() //nolint:staticcheck // the driver has nothing newer
}

func (c *faultConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *faultConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *faultConn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := c.Conn.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *faultConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}
