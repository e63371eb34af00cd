package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// where builds a WHERE clause of the conditions that apply, so that each query the
// planner sees names only the columns it filters on and can use their index.
type where struct {
	conds []string
	args  []any
}

func (w *where) add(cond string, args ...any) {
	w.conds = append(w.conds, cond)
	w.args = append(w.args, args...)
}

func (w *where) sql() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

// timeRange adds col in [since, until).
func (w *where) timeRange(col string, since, until time.Time) {
	if !since.IsZero() {
		w.add(col+" >= ?", nanos(since))
	}
	if !until.IsZero() {
		w.add(col+" < ?", nanos(until))
	}
}

// keyset adds "after k" in the (created, id) order, or "before k" when desc.
func (w *where) keyset(created, id string, k broker.Key, desc bool) {
	if k.IsZero() {
		return
	}
	op := ">"
	if desc {
		op = "<"
	}
	// The leading bound on created alone lets both planners start an index range scan
	// there; the OR then drops the rows of that created time up to the key's ID.
	w.add(created+" "+op+"= ? AND ("+created+" "+op+" ? OR "+id+" "+op+" ?)", nanos(k.Time), nanos(k.Time), k.ID)
}

func order(desc bool, cols ...string) string {
	dir := ""
	if desc {
		dir = " DESC"
	}
	return " ORDER BY " + strings.Join(cols, dir+", ") + dir
}

func limit(n int) string {
	if n <= 0 {
		return ""
	}
	return " LIMIT " + strconv.Itoa(n)
}

// Sessions implements broker.Store.
func (s *Store) Sessions(ctx context.Context, f broker.SessionFilter) ([]broker.Session, error) {
	var w where
	if f.Owner != "" {
		w.add("owner = ?", f.Owner)
	}
	w.timeRange("created", f.Since, f.Until)
	w.keyset("created", "id", f.After, f.Desc)
	rows, err := s.query(ctx, `SELECT `+sessionCols+` FROM sessions`+w.sql()+
		order(f.Desc, "created", "id")+limit(f.Limit), w.args...)
	if err != nil {
		return nil, fmt.Errorf("listing sessions: %w", err)
	}
	return collect(rows, "listing sessions", scanSession)
}

// ListSessions implements broker.Store.
func (s *Store) ListSessions(ctx context.Context, owner string) ([]broker.Session, error) {
	return s.Sessions(ctx, broker.SessionFilter{Owner: owner})
}

// ListRequests implements broker.Store.
func (s *Store) ListRequests(ctx context.Context, f broker.RequestFilter) ([]broker.Request, error) {
	var w where
	if f.SessionID != "" {
		w.add("r.session_id = ?", f.SessionID)
	}
	if f.State != "" {
		w.add("r.state = ?", f.State)
	}
	if f.Owner != "" {
		w.add("r.session_id IN (SELECT id FROM sessions WHERE owner = ?)", f.Owner)
	}
	w.timeRange("r.created", f.Since, f.Until)
	if !f.UpdatedSince.IsZero() {
		w.add("r.updated >= ?", nanos(f.UpdatedSince))
	}
	w.keyset("r.created", "r.id", f.After, f.Desc)
	created := "r.created"
	if !f.UpdatedSince.IsZero() {
		// What changed since a version is few rows, and recent ones: found by the index
		// on updated and then sorted. Ordered by the bare column, PostgreSQL walks the
		// index on created from the oldest instead, expecting the changed rows spread
		// through it, and reads nearly all rows before the first (bench/history, 100,000
		// requests, the last hour's: 21.7 ms; as "+created", which no index orders,
		// 1.9 ms). SQLite chose the index on updated either way.
		created = "+r.created"
	}
	rows, err := s.query(ctx, `SELECT `+prefixed("r.", requestCols)+` FROM requests r`+w.sql()+
		order(f.Desc, created, "r.id")+limit(f.Limit), w.args...)
	if err != nil {
		return nil, fmt.Errorf("listing requests: %w", err)
	}
	return collect(rows, "listing requests", scanRequest)
}

// AuditLog implements broker.Store.
func (s *Store) AuditLog(ctx context.Context, sessionID string) ([]broker.AuditEvent, error) {
	return s.AuditEvents(ctx, broker.AuditFilter{SessionID: sessionID})
}

const auditCols = `id, time, actor, action, session_id, request_id, packages, decision, detail`

// AuditEvents implements broker.Store.
func (s *Store) AuditEvents(ctx context.Context, f broker.AuditFilter) ([]broker.AuditEvent, error) {
	var w where
	if f.SessionID != "" {
		w.add("session_id = ?", f.SessionID)
	}
	if f.Owner != "" {
		w.add("session_id IN (SELECT id FROM sessions WHERE owner = ?)", f.Owner)
	}
	if f.Action != "" {
		w.add("action = ?", f.Action)
	}
	w.timeRange("time", f.Since, f.Until)
	// The same range as bounds on the ID, which the list is ordered by: exact (the
	// smallest and largest IDs of events in the range), found in the time index, and
	// what lets a range near the end of a long log skip the rows before it.
	if !f.Since.IsZero() {
		w.add("id >= (SELECT MIN(id + 0) FROM audit WHERE time >= ?)", nanos(f.Since))
	}
	if !f.Until.IsZero() {
		w.add("id <= (SELECT MAX(id + 0) FROM audit WHERE time < ?)", nanos(f.Until))
	}
	if f.AfterID != 0 {
		if f.Desc {
			w.add("id < ?", f.AfterID)
		} else {
			w.add("id > ?", f.AfterID)
		}
	}
	rows, err := s.query(ctx, `SELECT `+auditCols+` FROM audit`+w.sql()+order(f.Desc, "id")+limit(f.Limit), w.args...)
	if err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	return collect(rows, "reading the audit log", scanAudit)
}

func scanAudit(sc scanner) (broker.AuditEvent, error) {
	var e broker.AuditEvent
	var tm int64
	var pkgs string
	if err := sc.Scan(&e.ID, &tm, &e.Actor, &e.Action, &e.SessionID, &e.RequestID, &pkgs, &e.Decision, &e.Detail); err != nil {
		return e, err
	}
	if err := json.Unmarshal([]byte(pkgs), &e.Packages); err != nil {
		return e, fmt.Errorf("audit event %d: %w", e.ID, err)
	}
	if len(e.Packages) == 0 {
		e.Packages = nil
	}
	e.Time = fromNanos(tm)
	return e, nil
}

// PruneAudit implements broker.Store. The audit_horizon row moves forward first; the
// table's delete trigger refuses any event at or after it.
func (s *Store) PruneAudit(ctx context.Context, before time.Time, e broker.AuditEvent) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(t tx) error {
		if _, err := t.exec(ctx, `UPDATE audit_horizon SET cutoff = ? WHERE cutoff < ?`, nanos(before), nanos(before)); err != nil {
			return fmt.Errorf("moving the audit horizon: %w", err)
		}
		var cutoff int64
		if err := t.queryRow(ctx, `SELECT cutoff FROM audit_horizon`).Scan(&cutoff); err != nil {
			return fmt.Errorf("reading the audit horizon: %w", err)
		}
		res, err := t.exec(ctx, `DELETE FROM audit WHERE time < ?`, cutoff)
		if err != nil {
			return fmt.Errorf("pruning the audit log: %w", err)
		}
		if n, err = res.RowsAffected(); err != nil {
			return fmt.Errorf("pruning the audit log: %w", err)
		}
		e.Detail = fmt.Sprintf("removed %d events before %s", n, fromNanos(cutoff).Format(time.RFC3339Nano))
		return t.audit(ctx, e)
	})
	return n, err
}
