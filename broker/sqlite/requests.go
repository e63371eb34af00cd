package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pylayer/pylayer/broker"
)

const requestCols = `id, session_id, specs, upload, state, decision, reasons, isolated, packages,
	lock_key, digest, error, approver, created, updated`

func validState(s string) bool {
	for _, v := range broker.States {
		if s == v {
			return true
		}
	}
	return false
}

func checkRequest(r *broker.Request) error {
	if r.ID == "" || r.SessionID == "" {
		return fmt.Errorf("%w: ID and SessionID are required", broker.ErrInvalid)
	}
	if !validState(r.State) {
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

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func scanRequest(sc interface{ Scan(...any) error }) (broker.Request, error) {
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
func (s *Store) CreateRequest(ctx context.Context, r broker.Request) error {
	if err := checkRequest(&r); err != nil {
		return fmt.Errorf("creating request: %w", err)
	}
	args, err := requestArgs(&r)
	if err != nil {
		return fmt.Errorf("creating request %q: %w", r.ID, err)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := sessionExists(ctx, tx, r.SessionID); err != nil {
			return fmt.Errorf("creating request %q: %w", r.ID, err)
		}
		if ok, err := exists(ctx, tx, `SELECT 1 FROM requests WHERE id = ?`, r.ID); err != nil {
			return fmt.Errorf("creating request %q: %w", r.ID, err)
		} else if ok {
			return fmt.Errorf("creating request %q: %w: it exists", r.ID, broker.ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO requests (`+requestCols+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, args...); err != nil {
			return fmt.Errorf("creating request %q: %w", r.ID, err)
		}
		return nil
	})
}

// GetRequest implements broker.Store.
func (s *Store) GetRequest(ctx context.Context, id string) (broker.Request, error) {
	r, err := scanRequest(s.db.QueryRowContext(ctx, `SELECT `+requestCols+` FROM requests WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("request %q: %w", id, broker.ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("reading request %q: %w", id, err)
	}
	return r, nil
}

// UpdateRequest implements broker.Store.
func (s *Store) UpdateRequest(ctx context.Context, id string, fn func(*broker.Request) error) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		old, err := scanRequest(tx.QueryRowContext(ctx, `SELECT `+requestCols+` FROM requests WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("request %q: %w", id, broker.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("reading request %q: %w", id, err)
		}
		r := old
		r.Specs = append([]string(nil), old.Specs...)
		r.Reasons = append([]string(nil), old.Reasons...)
		r.Packages = append([]broker.Pkg(nil), old.Packages...)
		if err := fn(&r); err != nil {
			return err
		}
		if r.ID != old.ID || r.SessionID != old.SessionID || !r.Created.Equal(old.Created) {
			return fmt.Errorf("updating request %q: %w: ID, SessionID and Created cannot change", id, broker.ErrInvalid)
		}
		if err := checkRequest(&r); err != nil {
			return fmt.Errorf("updating request %q: %w", id, err)
		}
		args, err := requestArgs(&r)
		if err != nil {
			return fmt.Errorf("updating request %q: %w", id, err)
		}
		// args follow requestCols: skip id and session_id (0, 1) and created (13).
		res, err := tx.ExecContext(ctx, `UPDATE requests SET specs = ?, upload = ?, state = ?, decision = ?,
			reasons = ?, isolated = ?, packages = ?, lock_key = ?, digest = ?, error = ?, approver = ?, updated = ?
			WHERE id = ?`, append(append(args[2:13:13], args[14]), id)...)
		if err != nil {
			return fmt.Errorf("updating request %q: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("updating request %q: %d rows changed, want 1 (%v)", id, n, err)
		}
		return nil
	})
}

// ListRequests implements broker.Store.
func (s *Store) ListRequests(ctx context.Context, f broker.RequestFilter) ([]broker.Request, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+prefixed("r.", requestCols)+` FROM requests r
		JOIN sessions s ON s.id = r.session_id
		WHERE (? = '' OR r.session_id = ?) AND (? = '' OR r.state = ?) AND (? = '' OR s.owner = ?)
		ORDER BY r.created, r.id`, f.SessionID, f.SessionID, f.State, f.State, f.Owner, f.Owner)
	if err != nil {
		return nil, fmt.Errorf("listing requests: %w", err)
	}
	return collect(rows, "listing requests", scanRequest)
}

// NextBuildable implements broker.Store. One UPDATE ... RETURNING claims the row, so the
// claim is atomic without a read-then-write race (PostgreSQL would add FOR UPDATE SKIP
// LOCKED to the subquery).
func (s *Store) NextBuildable(ctx context.Context) (broker.Request, bool, error) {
	r, err := scanRequest(s.db.QueryRowContext(ctx, `UPDATE requests SET state = ?, updated = ?
		WHERE id = (SELECT id FROM requests WHERE state = ? ORDER BY created, id LIMIT 1) AND state = ?
		RETURNING `+requestCols, broker.StateBuilding, time.Now().UnixNano(), broker.StateApproved, broker.StateApproved))
	if errors.Is(err, sql.ErrNoRows) {
		return broker.Request{}, false, nil
	}
	if err != nil {
		return broker.Request{}, false, fmt.Errorf("claiming a buildable request: %w", err)
	}
	return r, true, nil
}

// prefixed qualifies each column of a column list with the table alias p.
func prefixed(p, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}
