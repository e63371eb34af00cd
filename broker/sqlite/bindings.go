package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pylayer/pylayer/broker"
)

func checkBinding(sessionID string, b *broker.Binding) error {
	if b.SessionID != sessionID {
		return fmt.Errorf("%w: binding of session %q given for session %q", broker.ErrInvalid, b.SessionID, sessionID)
	}
	if b.Kind != broker.KindExt && b.Kind != broker.KindIso {
		return fmt.Errorf("%w: binding kind %q, want ext or iso", broker.ErrInvalid, b.Kind)
	}
	if b.Digest == "" {
		return fmt.Errorf("%w: binding without a digest", broker.ErrInvalid)
	}
	return nil
}

func insertBinding(ctx context.Context, tx *sql.Tx, b *broker.Binding) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO bindings (session_id, kind, digest, ref, request_id, created)
		VALUES (?, ?, ?, ?, ?, ?)`, b.SessionID, b.Kind, b.Digest, b.Ref, b.RequestID, nanos(b.Created))
	return err
}

// AddBinding implements broker.Store.
func (s *Store) AddBinding(ctx context.Context, b broker.Binding) error {
	if err := checkBinding(b.SessionID, &b); err != nil {
		return fmt.Errorf("adding binding: %w", err)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := sessionExists(ctx, tx, b.SessionID); err != nil {
			return fmt.Errorf("adding binding: %w", err)
		}
		if err := insertBinding(ctx, tx, &b); err != nil {
			return fmt.Errorf("adding binding to session %q: %w", b.SessionID, err)
		}
		return nil
	})
}

// Bindings implements broker.Store.
func (s *Store) Bindings(ctx context.Context, sessionID string) ([]broker.Binding, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT session_id, kind, digest, ref, request_id, created
		FROM bindings WHERE session_id = ? ORDER BY seq`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("listing bindings of session %q: %w", sessionID, err)
	}
	defer rows.Close()
	var out []broker.Binding
	for rows.Next() {
		var b broker.Binding
		var created int64
		if err := rows.Scan(&b.SessionID, &b.Kind, &b.Digest, &b.Ref, &b.RequestID, &created); err != nil {
			return nil, fmt.Errorf("listing bindings of session %q: %w", sessionID, err)
		}
		b.Created = fromNanos(created)
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing bindings of session %q: %w", sessionID, err)
	}
	return out, nil
}

// ReplaceBindings implements broker.Store.
func (s *Store) ReplaceBindings(ctx context.Context, sessionID string, bs []broker.Binding) error {
	for i := range bs {
		if err := checkBinding(sessionID, &bs[i]); err != nil {
			return fmt.Errorf("replacing bindings: %w", err)
		}
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := sessionExists(ctx, tx, sessionID); err != nil {
			return fmt.Errorf("replacing bindings: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM bindings WHERE session_id = ?`, sessionID); err != nil {
			return fmt.Errorf("replacing bindings of session %q: %w", sessionID, err)
		}
		for i := range bs {
			if err := insertBinding(ctx, tx, &bs[i]); err != nil {
				return fmt.Errorf("replacing bindings of session %q: %w", sessionID, err)
			}
		}
		return nil
	})
}

// Audit implements broker.Store.
func (s *Store) Audit(ctx context.Context, e broker.AuditEvent) error {
	if e.Actor == "" || e.Action == "" {
		return fmt.Errorf("auditing: %w: Actor and Action are required", broker.ErrInvalid)
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	pkgs, err := toJSON(nonNil(e.Packages))
	if err != nil {
		return fmt.Errorf("auditing %s: %w", e.Action, err)
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO audit (time, actor, action, session_id, request_id, packages, decision, detail)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, nanos(e.Time), e.Actor, e.Action, e.SessionID, e.RequestID, pkgs, e.Decision, e.Detail); err != nil {
		return fmt.Errorf("auditing %s: %w", e.Action, err)
	}
	return nil
}

// AuditLog implements broker.Store.
func (s *Store) AuditLog(ctx context.Context, sessionID string) ([]broker.AuditEvent, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, time, actor, action, session_id, request_id, packages, decision, detail
		FROM audit WHERE (? = '' OR session_id = ?) ORDER BY id`, sessionID, sessionID)
	if err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	defer rows.Close()
	var out []broker.AuditEvent
	for rows.Next() {
		var e broker.AuditEvent
		var t int64
		var pkgs string
		if err := rows.Scan(&e.ID, &t, &e.Actor, &e.Action, &e.SessionID, &e.RequestID, &pkgs, &e.Decision, &e.Detail); err != nil {
			return nil, fmt.Errorf("reading the audit log: %w", err)
		}
		if err := json.Unmarshal([]byte(pkgs), &e.Packages); err != nil {
			return nil, fmt.Errorf("reading audit event %d: %w", e.ID, err)
		}
		if len(e.Packages) == 0 {
			e.Packages = nil
		}
		e.Time = fromNanos(t)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	return out, nil
}
