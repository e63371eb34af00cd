package sqlstore

import (
	"context"
	"fmt"
)

// later is the rows the writes of a group commit's batch append, inserted together at
// the batch's end (flushLater): requests first, then bindings and audit events, each
// maxRows to a statement. Nothing in a write reads back what it appends, and a write
// never sees another's (they are concurrent callers'), so only the round trips change.
//
// The rows go in without ON CONFLICT and without reading their session first: a
// duplicate request ID or a missing session fails the statement and so the batch, and
// the group runs each write again alone (commitAll), with the checks that name the
// cause. Request IDs are random, and the server reads the session before it asks.
type later struct {
	requests, bindings, audit [][]any
}

func (t tx) flushLater(ctx context.Context) error {
	if t.later == nil {
		return nil
	}
	for _, ins := range []struct {
		what, into string
		rows       [][]any
	}{
		{"requests", `INSERT INTO requests (` + requestCols + `) VALUES `, t.later.requests},
		{"bindings", `INSERT INTO bindings (session_id, kind, digest, ref, request_id, created) VALUES `, t.later.bindings},
		{"audit events", `INSERT INTO audit (time, actor, action, session_id, request_id, packages, decision, detail) VALUES `, t.later.audit},
	} {
		for rows := ins.rows; len(rows) > 0; {
			n := min(len(rows), maxRows)
			args := make([]any, 0, n*len(rows[0]))
			for _, r := range rows[:n] {
				args = append(args, r...)
			}
			if _, err := t.exec(ctx, ins.into+values(n, len(rows[0])), args...); err != nil {
				return fmt.Errorf("inserting %d %s: %w", n, ins.what, err)
			}
			rows = rows[n:]
		}
	}
	*t.later = later{}
	return nil
}
