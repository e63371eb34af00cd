package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// Bind implements broker.Store: BindBuild outside any lease.
func (s *Store) Bind(ctx context.Context, b broker.Binding, lockKey string, audit broker.AuditEvent) error {
	return s.bind(ctx, "", b, lockKey, audit)
}

// bind is Bind by holder ("": a request never leased), which ends the lease.
func (s *Store) bind(ctx context.Context, holder string, b broker.Binding, lockKey string, audit broker.AuditEvent) error {
	if b.RequestID == "" {
		return fmt.Errorf("binding: %w: the binding names no request", broker.ErrInvalid)
	}
	if err := checkBinding(b.SessionID, &b); err != nil {
		return fmt.Errorf("binding request %q: %w", b.RequestID, err)
	}
	return s.inBackground(ctx, func(t tx) error {
		if err := t.holds(ctx, b.RequestID, holder); err != nil {
			return fmt.Errorf("binding: %w", err)
		}
		_, err := t.updateRequest(ctx, b.RequestID, func(r *broker.Request) error {
			if r.SessionID != b.SessionID {
				return fmt.Errorf("binding request %q: %w: it belongs to session %q, not %q", r.ID, broker.ErrInvalid, r.SessionID, b.SessionID)
			}
			if r.State != broker.StateBuilding && r.State != broker.StateBuilt {
				return fmt.Errorf("binding request %q: %w: it is %s, not building or built", r.ID, broker.ErrConflict, r.State)
			}
			r.State, r.Digest, r.LockKey = broker.StateBound, b.Digest, lockKey
			r.Updated = time.Now().UTC()
			return nil
		})
		if err != nil {
			return err
		}
		if err := t.insertBinding(ctx, &b); err != nil {
			return err
		}
		if err := t.endLease(ctx, b.RequestID); err != nil {
			return err
		}
		return t.audit(ctx, audit)
	})
}

// ApplyRebase implements broker.Store.
func (s *Store) ApplyRebase(ctx context.Context, p broker.RebasePlan) error {
	for i := range p.Bindings {
		if err := checkBinding(p.SessionID, &p.Bindings[i]); err != nil {
			return fmt.Errorf("rebasing session %q: %w", p.SessionID, err)
		}
	}
	for i := range p.Requests {
		if p.Requests[i].SessionID != p.SessionID {
			return fmt.Errorf("rebasing session %q: %w: request %q is of session %q", p.SessionID, broker.ErrInvalid, p.Requests[i].ID, p.Requests[i].SessionID)
		}
	}
	return s.inTx(ctx, func(t tx) error {
		var base string
		err := t.queryRow(ctx, `SELECT base FROM sessions WHERE id = ?`+s.d.ForUpdate, p.SessionID).Scan(&base)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("rebasing: session %q: %w", p.SessionID, broker.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("rebasing session %q: %w", p.SessionID, err)
		}
		if base != p.FromBase {
			return fmt.Errorf("rebasing session %q: %w: it moved to base %s while the rebase from %s was prepared; rebase again", p.SessionID, broker.ErrConflict, base, p.FromBase)
		}
		if err := t.setBase(ctx, p.SessionID, p.Interpreter, p.Base, p.BaseLock); err != nil {
			return err
		}
		if err := t.replaceBindings(ctx, p.SessionID, p.Bindings); err != nil {
			return err
		}
		for i := range p.Requests {
			if err := t.createRequest(ctx, &p.Requests[i]); err != nil {
				return fmt.Errorf("rebasing session %q: %w", p.SessionID, err)
			}
		}
		return t.audit(ctx, p.Audit...)
	})
}
