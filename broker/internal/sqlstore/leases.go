package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/pylayer/pylayer/broker"
)

func checkLease(l broker.Lease) error {
	if l.Holder == "" || l.TTL <= 0 {
		return fmt.Errorf("%w: a lease needs a holder and a positive TTL", broker.ErrInvalid)
	}
	return nil
}

// claimable is the condition of a request a builder may claim at time ?: approved, or
// building or built under an expired lease.
const claimable = `(state = 'approved' OR (state IN ('building', 'built') AND lease_until < ?))`

// leftToCrowd (at time ?, with DecisionApprovedIsolated twice) is an approved request that
// waits for a layer another request is building under a live lease: the same lock key,
// isolated or not alike. Its builder binds such requests together once the layer is
// published (Store.BindApproved, the crowd bind), so claiming each one on its own only
// adds transactions: measured in bench/broker.sh on PostgreSQL, a burst of 200 requests
// for two layers took some 50 claims, each a transaction of its own with a bind and
// lease renewals after it, in the write queue that the agents' POSTs wait in. Once the
// layer's request leaves building (bound, failed) or its lease expires, they are
// claimable again: what the crowd bind did not take (another base, say) is not left.
const leftToCrowd = `(state = 'approved' AND upload = '' AND lock_key <> '' AND EXISTS (
	SELECT 1 FROM requests b WHERE b.state IN ('building', 'built') AND b.lease_until >= ?
	AND b.lock_key = requests.lock_key AND (b.decision = ?) = (requests.decision = ?)))`

// ClaimBuild implements broker.Leases. It picks the row with the dialect's SkipLocked
// (FOR UPDATE SKIP LOCKED: concurrent claimers pass over a row being claimed instead of
// queueing behind it; SQLite's BEGIN IMMEDIATE runs claimers one after the other), moves
// it to building under l and, when it took over an expired lease, audits the takeover,
// all in one transaction.
func (s *Store) ClaimBuild(ctx context.Context, l broker.Lease) (broker.Request, bool, error) {
	if err := checkLease(l); err != nil {
		return broker.Request{}, false, fmt.Errorf("claiming a build: %w", err)
	}
	now := l.At()
	var r broker.Request
	found := false
	err := s.inBackground(ctx, func(t tx) error {
		var id, state, holder string
		var until int64
		err := t.queryRow(ctx, `SELECT id, state, lease_holder, lease_until FROM requests
			WHERE `+claimable+` AND NOT `+leftToCrowd+`
			ORDER BY created, id LIMIT 1`+s.d.SkipLocked, now.UnixNano(),
			now.UnixNano(), broker.DecisionApprovedIsolated, broker.DecisionApprovedIsolated).Scan(&id, &state, &holder, &until)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := t.exec(ctx, `UPDATE requests SET state = ?, lease_holder = ?, lease_until = ?, updated = ? WHERE id = ?`,
			broker.StateBuilding, l.Holder, l.Until().UnixNano(), now.UnixNano(), id); err != nil {
			return err
		}
		if r, err = t.lockRequest(ctx, id); err != nil {
			return err
		}
		if broker.State(state) != broker.StateApproved {
			detail := "the worker that was building it stopped; building again"
			if holder != "" {
				detail = fmt.Sprintf("the lease of %s expired %s ago (its worker stopped mid-build); %s builds it again",
					holder, now.Sub(time.Unix(0, until)).Round(time.Millisecond), l.Holder)
			}
			if err := t.audit(ctx, broker.AuditEvent{Time: now.UTC(), Actor: "builder", Action: "resume", SessionID: r.SessionID,
				RequestID: r.ID, Packages: r.Packages, Decision: r.Decision, Detail: detail}); err != nil {
				return err
			}
		}
		found = true
		return t.notify(ctx, id, broker.StateBuilding)
	})
	if err != nil {
		return broker.Request{}, false, fmt.Errorf("claiming a build: %w", err)
	}
	return r, found, nil
}

// RenewBuild implements broker.Leases.
func (s *Store) RenewBuild(ctx context.Context, id string, l broker.Lease) error {
	if err := checkLease(l); err != nil {
		return fmt.Errorf("renewing the lease on request %q: %w", id, err)
	}
	res, err := s.execBackground(ctx, (`UPDATE requests SET lease_until = ?
		WHERE id = ? AND lease_holder = ? AND state IN ('building', 'built')`), l.Until().UnixNano(), id, l.Holder)
	if err != nil {
		return fmt.Errorf("renewing the lease on request %q: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("renewing the lease on request %q: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("renewing the lease on request %q: %w: %s holds it no more (it expired and another worker claimed it, or the build ended)", id, broker.ErrConflict, l.Holder)
	}
	return nil
}

// holds checks inside t that holder may finish request id: it holds its lease, or the
// request was never leased and holder is "" (a caller outside any lease). It locks the row.
func (t tx) holds(ctx context.Context, id, holder string) error {
	var cur string
	err := t.queryRow(ctx, `SELECT lease_holder FROM requests WHERE id = ?`+t.s.d.ForUpdate, id).Scan(&cur)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("request %q: %w", id, broker.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("reading the lease on request %q: %w", id, err)
	}
	if cur != holder {
		return fmt.Errorf("request %q: %w: its build lease is held by %s, not %s", id, broker.ErrConflict, orNone(cur), orNone(holder))
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "no one"
	}
	return s
}

func (t tx) endLease(ctx context.Context, id string) error {
	if _, err := t.exec(ctx, `UPDATE requests SET lease_holder = '', lease_until = 0 WHERE id = ?`, id); err != nil {
		return fmt.Errorf("ending the lease on request %q: %w", id, err)
	}
	return nil
}

// BindBuild implements broker.Leases.
func (s *Store) BindBuild(ctx context.Context, l broker.Lease, b broker.Binding, lockKey string, audit broker.AuditEvent) error {
	if err := checkLease(l); err != nil {
		return fmt.Errorf("binding request %q: %w", b.RequestID, err)
	}
	return s.bind(ctx, l.Holder, b, lockKey, audit)
}

// FinishBuild implements broker.Leases.
func (s *Store) FinishBuild(ctx context.Context, id string, l broker.Lease, fn func(*broker.Request) (broker.AuditEvent, error)) error {
	if err := checkLease(l); err != nil {
		return fmt.Errorf("finishing the build of request %q: %w", id, err)
	}
	return s.inBackground(ctx, func(t tx) error {
		if err := t.holds(ctx, id, l.Holder); err != nil {
			return err
		}
		if err := t.transition(ctx, id, fn); err != nil {
			return err
		}
		return t.endLease(ctx, id)
	})
}

// AcquireLease implements broker.Leases with one upsert: it inserts the lease, or takes
// over a row that is the holder's own or has expired; a live lease of another holder is
// left alone and no row changes.
func (s *Store) AcquireLease(ctx context.Context, name string, l broker.Lease) (bool, error) {
	if err := checkLease(l); err != nil {
		return false, fmt.Errorf("acquiring lease %q: %w", name, err)
	}
	if name == "" {
		return false, fmt.Errorf("acquiring a lease: %w: no name", broker.ErrInvalid)
	}
	res, err := s.execBackground(ctx, (`INSERT INTO leases (name, holder, until) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until
		WHERE leases.holder = excluded.holder OR leases.until < ?`), name, l.Holder, l.Until().UnixNano(), l.At().UnixNano())
	if err != nil {
		return false, fmt.Errorf("acquiring lease %q: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("acquiring lease %q: %w", name, err)
	}
	return n == 1, nil
}

// ReleaseLease implements broker.Leases.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	if _, err := s.execBackground(ctx, (`DELETE FROM leases WHERE name = ? AND holder = ?`), name, holder); err != nil {
		return fmt.Errorf("releasing lease %q: %w", name, err)
	}
	return nil
}

// notify tells the other replicas, when the transaction commits, that request id changed
// to state st (PostgreSQL: pg_notify, delivered at commit and dropped at rollback). The
// changes of a transaction are sent together, in one statement, by notifyStmt.
func (t tx) notify(_ context.Context, id string, st broker.State) error {
	if t.s.d.Notify != "" {
		*t.notes = append(*t.notes, broker.ChangePayload(id, st))
	}
	return nil
}

// notifyStmt is the statement that sends the transaction's notifications, each payload
// once, or nil.
func (t tx) notifyStmt() *deferredStmt {
	notes := *t.notes
	if t.s.d.Notify == "" || len(notes) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(notes))
	uniq := notes[:0:0]
	for _, n := range notes {
		if !seen[n] {
			seen[n] = true
			uniq = append(uniq, n)
		}
	}
	*t.notes = notes[:0]
	return &deferredStmt{what: fmt.Sprintf("notifying %d request changes", len(uniq)), query: t.s.d.Notify, args: []any{uniq}}
}
