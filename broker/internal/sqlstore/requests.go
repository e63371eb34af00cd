package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pylayer/pylayer/broker"
)

const requestCols = `id, session_id, specs, upload, state, decision, reasons, isolated, packages,
	lock_key, digest, error, approver, created, updated`

func checkRequest(r *broker.Request) error {
	if r.ID == "" || r.SessionID == "" {
		return fmt.Errorf("%w: ID and SessionID are required", broker.ErrInvalid)
	}
	if !plainKey(r.ID) {
		return fmt.Errorf("%w: request ID %q must be UTF-8 without NUL", broker.ErrInvalid, r.ID)
	}
	if !slices.Contains(broker.States, r.State) {
		return fmt.Errorf("%w: unknown state %q", broker.ErrInvalid, r.State)
	}
	return nil
}

// requestArgs are the values of requestCols, in order.
func requestArgs(r *broker.Request) ([]any, error) {
	specs, err := toJSON(nonNil(r.Specs))
	if err != nil {
		return nil, err
	}
	reasons, err := toJSON(nonNil(r.Reasons))
	if err != nil {
		return nil, err
	}
	pkgs, err := toJSON(nonNil(r.Packages))
	if err != nil {
		return nil, err
	}
	iso := 0
	if r.Isolated {
		iso = 1
	}
	return []any{r.ID, r.SessionID, specs, r.Upload, r.State, r.Decision, reasons, iso, pkgs,
		r.LockKey, r.Digest, r.Error, r.Approver, nanos(r.Created), nanos(r.Updated)}, nil
}

func scanRequest(sc scanner) (broker.Request, error) {
	var r broker.Request
	var specs, reasons, pkgs string
	var iso int
	var created, updated int64
	if err := sc.Scan(&r.ID, &r.SessionID, &specs, &r.Upload, &r.State, &r.Decision, &reasons, &iso, &pkgs,
		&r.LockKey, &r.Digest, &r.Error, &r.Approver, &created, &updated); err != nil {
		return r, err
	}
	if err := json.Unmarshal([]byte(specs), &r.Specs); err != nil {
		return r, fmt.Errorf("request %q: decoding specs: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(reasons), &r.Reasons); err != nil {
		return r, fmt.Errorf("request %q: decoding reasons: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(pkgs), &r.Packages); err != nil {
		return r, fmt.Errorf("request %q: decoding packages: %w", r.ID, err)
	}
	if len(r.Reasons) == 0 {
		r.Reasons = nil
	}
	if len(r.Packages) == 0 {
		r.Packages = nil
	}
	if len(r.Specs) == 0 {
		r.Specs = nil
	}
	r.Isolated = iso != 0
	r.Created, r.Updated = fromNanos(created), fromNanos(updated)
	return r, nil
}

// CreateRequest implements broker.Store.
func (s *Store) CreateRequest(ctx context.Context, r broker.Request, audit ...broker.AuditEvent) error {
	return s.inTx(ctx, func(t tx) error {
		if err := t.createRequest(ctx, &r); err != nil {
			return err
		}
		return t.audit(ctx, audit...)
	})
}

// CreateBound implements broker.Store.
func (s *Store) CreateBound(ctx context.Context, r broker.Request, b broker.Binding, audit ...broker.AuditEvent) error {
	switch {
	case r.State != broker.StateBound:
		return fmt.Errorf("creating bound request %q: %w: its state is %q", r.ID, broker.ErrInvalid, r.State)
	case b.RequestID != r.ID || b.SessionID != r.SessionID || b.Digest != r.Digest:
		return fmt.Errorf("creating bound request %q: %w: the binding is of request %q, session %q, digest %q", r.ID, broker.ErrInvalid, b.RequestID, b.SessionID, b.Digest)
	}
	if err := checkBinding(r.SessionID, &b); err != nil {
		return fmt.Errorf("creating bound request %q: %w", r.ID, err)
	}
	return s.inTx(ctx, func(t tx) error {
		if err := t.createRequest(ctx, &r); err != nil {
			return err
		}
		if err := t.insertBinding(ctx, &b); err != nil {
			return err
		}
		return t.audit(ctx, audit...)
	})
}

// Classified implements broker.Store: one conditional UPDATE (no read of the row first:
// a crowd's classifications are a burst of writes), which changes nothing unless the
// request is classifying, in the session named.
func (s *Store) Classified(ctx context.Context, c broker.Request, b *broker.Binding, audit ...broker.AuditEvent) error {
	switch c.State {
	case broker.StateApproved, broker.StatePending, broker.StateRejected:
		if b != nil {
			return fmt.Errorf("classifying request %q: %w: a binding for a request that is %s", c.ID, broker.ErrInvalid, c.State)
		}
	case broker.StateBound:
		if b == nil || b.RequestID != c.ID || b.Digest != c.Digest {
			return fmt.Errorf("classifying request %q: %w: bound needs its binding, of this request and digest", c.ID, broker.ErrInvalid)
		}
		bb := *b
		if err := checkBinding(c.SessionID, &bb); err != nil {
			return fmt.Errorf("classifying request %q: %w", c.ID, err)
		}
		b = &bb
	default:
		return fmt.Errorf("classifying request %q: %w: it cannot become %q", c.ID, broker.ErrInvalid, c.State)
	}
	c.Error, c.Updated = "", time.Now().UTC()
	args, err := requestArgs(&c)
	if err != nil {
		return fmt.Errorf("classifying request %q: %w", c.ID, err)
	}
	return s.inBackground(ctx, func(t tx) error {
		if t.later != nil && s.d.ClassifyMany != "" { // a batch: one UPDATE for all (batch.go)
			t.later.classified = append(t.later.classified, args)
		} else if err := t.classify(ctx, c, args); err != nil {
			return err
		}
		if err := t.notify(ctx, c.ID, c.State); err != nil {
			return err
		}
		if b != nil {
			if err := t.insertBinding(ctx, b); err != nil {
				return err
			}
		}
		return t.audit(ctx, audit...)
	})
}

// classify is Classified's UPDATE, alone; args are c's requestArgs.
func (t tx) classify(ctx context.Context, c broker.Request, args []any) error {
	// args follow requestCols: state (4) to error (11), then updated (14).
	res, err := t.exec(ctx, `UPDATE requests SET state = ?, decision = ?, reasons = ?, isolated = ?, packages = ?,
		lock_key = ?, digest = ?, error = ?, updated = ? WHERE id = ? AND session_id = ? AND state = ?`,
		append(append(args[4:12:12], args[14]), c.ID, c.SessionID, broker.StateClassifying)...)
	if err != nil {
		return fmt.Errorf("classifying request %q: %w", c.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("classifying request %q: %w", c.ID, err)
	} else if n != 1 {
		r, err := t.lockRequest(ctx, c.ID) // why not: gone, another session's, or moved on
		switch {
		case err != nil:
			return fmt.Errorf("classifying: %w", err)
		case r.SessionID != c.SessionID:
			return fmt.Errorf("classifying request %q: %w: it belongs to session %q, not %q", c.ID, broker.ErrInvalid, r.SessionID, c.SessionID)
		default:
			return fmt.Errorf("classifying request %q: %w: it is %s, not classifying", c.ID, broker.ErrConflict, r.State)
		}
	}
	return nil
}

func (t tx) createRequest(ctx context.Context, r *broker.Request) error {
	if err := checkRequest(r); err != nil {
		return fmt.Errorf("creating request: %w", err)
	}
	args, err := requestArgs(r)
	if err != nil {
		return fmt.Errorf("creating request %q: %w", r.ID, err)
	}
	if t.later != nil { // a batch: the row goes in with the others (batch.go)
		t.later.requests = append(t.later.requests, args)
		return t.notify(ctx, r.ID, r.State)
	}
	if err := t.sessionExists(ctx, r.SessionID); err != nil {
		return fmt.Errorf("creating request %q: %w", r.ID, err)
	}
	if err := t.insertNew(ctx, fmt.Sprintf("creating request %q", r.ID), "it exists", `INSERT INTO requests (`+requestCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, args...); err != nil {
		return err
	}
	return t.notify(ctx, r.ID, r.State)
}

// GetRequest implements broker.Store.
func (s *Store) GetRequest(ctx context.Context, id string) (broker.Request, error) {
	r, found, err := s.requests.get(ctx, s, id)
	if err != nil {
		return r, fmt.Errorf("reading request %q: %w", id, err)
	}
	if !found {
		return r, fmt.Errorf("request %q: %w", id, broker.ErrNotFound)
	}
	return r, nil
}

// UpdateRequest implements broker.Store.
func (s *Store) UpdateRequest(ctx context.Context, id string, fn func(*broker.Request) error) error {
	return s.inTx(ctx, func(t tx) error {
		_, err := t.updateRequest(ctx, id, fn)
		return err
	})
}

// Transition implements broker.Store.
func (s *Store) Transition(ctx context.Context, id string, fn func(*broker.Request) (broker.AuditEvent, error)) error {
	return s.inTx(ctx, func(t tx) error { return t.transition(ctx, id, fn) })
}

// transition is Transition inside t.
func (t tx) transition(ctx context.Context, id string, fn func(*broker.Request) (broker.AuditEvent, error)) error {
	var e broker.AuditEvent
	if _, err := t.updateRequest(ctx, id, func(r *broker.Request) error {
		var err error
		e, err = fn(r)
		return err
	}); err != nil {
		return err
	}
	return t.audit(ctx, e)
}

// lockRequest reads a request to change it.
func (t tx) lockRequest(ctx context.Context, id string) (broker.Request, error) {
	r, err := scanRequest(t.queryRow(ctx, `SELECT `+requestCols+` FROM requests WHERE id = ?`+t.s.d.ForUpdate, id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("request %q: %w", id, broker.ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("reading request %q: %w", id, err)
	}
	return r, nil
}

// updateRequest is UpdateRequest inside t; it returns the request as written.
func (t tx) updateRequest(ctx context.Context, id string, fn func(*broker.Request) error) (broker.Request, error) {
	old, err := t.lockRequest(ctx, id)
	if err != nil {
		return old, err
	}
	r := old
	r.Specs = slices.Clone(old.Specs)
	r.Reasons = slices.Clone(old.Reasons)
	r.Packages = slices.Clone(old.Packages)
	if err := fn(&r); err != nil {
		return old, err
	}
	if r.ID != old.ID || r.SessionID != old.SessionID || !r.Created.Equal(old.Created) {
		return old, fmt.Errorf("updating request %q: %w: ID, SessionID and Created cannot change", id, broker.ErrInvalid)
	}
	if err := checkRequest(&r); err != nil {
		return old, fmt.Errorf("updating request %q: %w", id, err)
	}
	if r.Updated.Equal(old.Updated) { // every change moves Updated: lists of what changed since a time rely on it
		r.Updated = time.Now().UTC()
	}
	args, err := requestArgs(&r)
	if err != nil {
		return old, fmt.Errorf("updating request %q: %w", id, err)
	}
	// args follow requestCols: skip id and session_id (0, 1) and created (13).
	res, err := t.exec(ctx, `UPDATE requests SET specs = ?, upload = ?, state = ?, decision = ?,
		reasons = ?, isolated = ?, packages = ?, lock_key = ?, digest = ?, error = ?, approver = ?, updated = ?
		WHERE id = ?`, append(append(args[2:13:13], args[14]), id)...)
	if err != nil {
		return old, fmt.Errorf("updating request %q: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return old, fmt.Errorf("updating request %q: %d rows changed, want 1 (%v)", id, n, err)
	}
	return r, t.notify(ctx, id, r.State)
}

// prefixed qualifies each column of a column list with the table alias p.
func prefixed(p, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}
