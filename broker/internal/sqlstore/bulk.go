package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// BindApproved implements broker.Store in four statements for any number of requests (up
// to maxRows): the select of what p serves (FOR UPDATE SKIP LOCKED where the dialect has
// row locks, so that a claimer's row is passed over rather than waited for), one UPDATE,
// one INSERT of the bindings and one of the audit events; and the transaction's
// notifications. Binding a crowd one request at a time was two transactions and eleven
// statements each, every one a round trip to a database server.
func (s *Store) BindApproved(ctx context.Context, p broker.PublishedLayer, limit int, audit func(broker.Request) broker.AuditEvent) ([]broker.Request, error) {
	switch {
	case p.Kind != broker.KindExt && p.Kind != broker.KindIso:
		return nil, fmt.Errorf("binding approved requests: %w: layer kind %q, want ext or iso", broker.ErrInvalid, p.Kind)
	case p.Digest == "" || p.LockKey == "":
		return nil, fmt.Errorf("binding approved requests: %w: a layer digest and a lock key are required", broker.ErrInvalid)
	case limit <= 0:
		return nil, nil
	}
	limit = min(limit, maxRows)
	iso := `decision <> ?`
	if p.Isolated {
		iso = `decision = ?`
	}
	var bound []broker.Request
	err := s.inBackground(ctx, func(t tx) error {
		bound = bound[:0]
		rows, err := t.query(ctx, `SELECT `+requestCols+` FROM requests
			WHERE state = ? AND lock_key = ? AND upload = '' AND `+iso+`
			AND session_id IN (SELECT id FROM sessions WHERE base = ? AND interpreter = ?)
			ORDER BY created, id LIMIT ?`+s.d.SkipLocked,
			broker.StateApproved, p.LockKey, broker.DecisionApprovedIsolated, p.Base, p.Interpreter, limit)
		if err != nil {
			return fmt.Errorf("selecting approved requests of lock %s: %w", p.LockKey, err)
		}
		found, err := collect(rows, "selecting approved requests", scanRequest)
		if err != nil || len(found) == 0 {
			return err
		}
		now := time.Now().UTC()
		ids := make([]string, 0, len(found))
		bs := make([]broker.Binding, len(found))
		events := make([]broker.AuditEvent, len(found))
		for i := range found {
			r := &found[i]
			r.State, r.Digest, r.Updated = broker.StateBound, p.Digest, now
			ids = append(ids, r.ID)
			bs[i] = broker.Binding{SessionID: r.SessionID, Kind: p.Kind, Digest: p.Digest, Ref: p.Ref, RequestID: r.ID, Created: now}
			events[i] = audit(*r)
		}
		q, args := s.idsIn(`UPDATE requests SET state = ?, digest = ?, updated = ? WHERE id`, ids,
			broker.StateBound, p.Digest, nanos(now))
		res, err := t.exec(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("binding approved requests of lock %s: %w", p.LockKey, err)
		}
		if n, err := res.RowsAffected(); err != nil || int(n) != len(found) {
			return fmt.Errorf("binding approved requests of lock %s: %d rows changed, want %d (%v)", p.LockKey, n, len(found), err)
		}
		if err := t.insertBindings(ctx, bs); err != nil {
			return err
		}
		if err := t.audit(ctx, events...); err != nil {
			return err
		}
		for _, r := range found {
			if err := t.notify(ctx, r.ID, r.State); err != nil {
				return err
			}
		}
		bound = found
		return nil
	})
	if err != nil {
		return nil, err
	}
	return bound, nil
}

// idsIn completes query, which ends in "WHERE key", with a condition that key is one of
// keys, and returns it with its arguments (args, then the keys): the dialect's list
// bound to one parameter (Dialect.InList), one statement text for any count, or else
// IN (?, ?, ...).
func (s *Store) idsIn(query string, keys []string, args ...any) (string, []any) {
	if s.d.ListArg != nil {
		return query + ` ` + s.d.InList, append(args, s.d.ListArg(keys))
	}
	for _, k := range keys {
		args = append(args, k)
	}
	return query + ` IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(keys)), ", ") + `)`, args
}
