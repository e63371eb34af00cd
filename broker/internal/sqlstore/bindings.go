package sqlstore

import (
	"context"
	"fmt"
	"strings"
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

func (t tx) insertBinding(ctx context.Context, b *broker.Binding) error {
	return t.insertBindings(ctx, []broker.Binding{*b})
}

// maxRows bounds the rows of one multi-row VALUES list (15 values each at most: far below
// either database's limit on a statement's parameters).
const maxRows = 64

// insertBindings adds bs in as few statements as it can (insertMany): each statement is
// a round trip to a database server.
func (t tx) insertBindings(ctx context.Context, bs []broker.Binding) error {
	rows := make([][]any, len(bs))
	for i, b := range bs {
		rows[i] = []any{b.SessionID, b.Kind, b.Digest, b.Ref, b.RequestID, nanos(b.Created)}
	}
	if t.later != nil {
		t.later.bindings = append(t.later.bindings, rows...)
		return nil
	}
	for _, st := range t.s.insertMany(nil, "adding bindings", bindingsTable, rows) {
		if _, err := t.exec(ctx, st.query, st.args...); err != nil {
			return fmt.Errorf("adding binding to session %q: %w", bs[0].SessionID, err)
		}
	}
	return nil
}

// values is n tuples of k '?' placeholders: "(?, ?), (?, ?)".
func values(n, k int) string {
	tuple := "(" + strings.Repeat("?, ", k-1) + "?)"
	return strings.Repeat(tuple+", ", n-1) + tuple
}

// AddBinding implements broker.Store.
func (s *Store) AddBinding(ctx context.Context, b broker.Binding) error {
	if err := checkBinding(b.SessionID, &b); err != nil {
		return fmt.Errorf("adding binding: %w", err)
	}
	return s.inTx(ctx, func(t tx) error {
		if err := t.sessionExists(ctx, b.SessionID); err != nil {
			return fmt.Errorf("adding binding: %w", err)
		}
		return t.insertBinding(ctx, &b)
	})
}

// Bindings implements broker.Store.
func (s *Store) Bindings(ctx context.Context, sessionID string) ([]broker.Binding, error) {
	rows, err := s.query(ctx, `SELECT session_id, kind, digest, ref, request_id, created
		FROM bindings WHERE session_id = ? ORDER BY seq`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("listing bindings of session %q: %w", sessionID, err)
	}
	return collect(rows, fmt.Sprintf("listing bindings of session %q", sessionID), func(sc scanner) (broker.Binding, error) {
		var b broker.Binding
		var created int64
		err := sc.Scan(&b.SessionID, &b.Kind, &b.Digest, &b.Ref, &b.RequestID, &created)
		b.Created = fromNanos(created)
		return b, err
	})
}

// ReplaceBindings implements broker.Store.
func (s *Store) ReplaceBindings(ctx context.Context, sessionID string, bs []broker.Binding) error {
	for i := range bs {
		if err := checkBinding(sessionID, &bs[i]); err != nil {
			return fmt.Errorf("replacing bindings: %w", err)
		}
	}
	return s.inTx(ctx, func(t tx) error { return t.replaceBindings(ctx, sessionID, bs) })
}

func (t tx) replaceBindings(ctx context.Context, sessionID string, bs []broker.Binding) error {
	if err := t.sessionExists(ctx, sessionID); err != nil {
		return fmt.Errorf("replacing bindings: %w", err)
	}
	if _, err := t.exec(ctx, `DELETE FROM bindings WHERE session_id = ?`, sessionID); err != nil {
		return fmt.Errorf("replacing bindings of session %q: %w", sessionID, err)
	}
	for i := range bs {
		if err := t.insertBinding(ctx, &bs[i]); err != nil {
			return fmt.Errorf("replacing bindings: %w", err)
		}
	}
	return nil
}

// Audit implements broker.Store.
func (s *Store) Audit(ctx context.Context, e broker.AuditEvent) error {
	return s.inTx(ctx, func(t tx) error { return t.audit(ctx, e) })
}

// audit appends events inside t, in as few statements as insertMany makes.
func (t tx) audit(ctx context.Context, events ...broker.AuditEvent) error {
	if len(events) == 0 {
		return nil
	}
	rows := make([][]any, len(events))
	for i, e := range events {
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
		rows[i] = []any{nanos(e.Time), e.Actor, e.Action, e.SessionID, e.RequestID, pkgs, e.Decision, e.Detail}
	}
	if t.later != nil {
		t.later.audit = append(t.later.audit, rows...)
		return nil
	}
	for _, st := range t.s.insertMany(nil, "auditing "+events[0].Action, auditTable, rows) {
		if _, err := t.exec(ctx, st.query, st.args...); err != nil {
			return fmt.Errorf("auditing %s: %w", events[0].Action, err)
		}
	}
	return nil
}
