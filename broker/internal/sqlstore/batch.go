package sqlstore

import (
	"context"
	"errors"
	"fmt"
)

// later is the rows the writes of a group commit's batch append, inserted together at
// the batch's end (flushLater): requests first, then classifications, bindings and audit
// events, each
// maxRows to a statement. Nothing in a write reads back what it appends, and a write
// never sees another's (they are concurrent callers'), so only the round trips change.
//
// The rows go in without ON CONFLICT and without reading their session first: a
// duplicate request ID or a missing session fails the statement and so the batch, and
// the group runs each write again alone (commitAll), with the checks that name the
// cause. Request IDs are random, and the server reads the session before it asks.
//
// Classifications (Store.Classified, with Dialect.ClassifyMany) go in one UPDATE after the
// requests: each changes its request only if it is classifying in its session, and if
// fewer rows changed than were classified, the batch fails in the same way and each write,
// alone, learns which request had moved on (another replica classified it first).
type later struct {
	requests, bindings, audit [][]any
	classified                [][]any // requestArgs of each classification
}

// errRefused fails a batch whose deferred statements did not all apply; each write is then
// run again alone (commitAll) and gets its own outcome.
var errRefused = errors.New("a deferred write of the batch was refused")

func (t tx) flushLater(ctx context.Context) error {
	if t.later == nil {
		return nil
	}
	if err := t.insertMany(ctx, "requests", `INSERT INTO requests (`+requestCols+`) VALUES `, t.later.requests); err != nil {
		return err
	}
	if err := t.classifyMany(ctx, t.later.classified); err != nil {
		return err
	}
	if err := t.insertMany(ctx, "bindings", `INSERT INTO bindings (session_id, kind, digest, ref, request_id, created) VALUES `, t.later.bindings); err != nil {
		return err
	}
	if err := t.insertMany(ctx, "audit events", `INSERT INTO audit (time, actor, action, session_id, request_id, packages, decision, detail) VALUES `, t.later.audit); err != nil {
		return err
	}
	*t.later = later{}
	return nil
}

// insertMany inserts rows, maxRows to a statement.
func (t tx) insertMany(ctx context.Context, what, into string, rows [][]any) error {
	for len(rows) > 0 {
		n := min(len(rows), maxRows)
		args := make([]any, 0, n*len(rows[0]))
		for _, r := range rows[:n] {
			args = append(args, r...)
		}
		if _, err := t.exec(ctx, into+values(n, len(rows[0])), args...); err != nil {
			return fmt.Errorf("inserting %d %s: %w", n, what, err)
		}
		rows = rows[n:]
	}
	return nil
}

// classifyMany applies the batch's classifications in one statement, Dialect.ClassifyMany,
// whose parameters are one array per column: id, session_id, state, decision, reasons,
// isolated, packages, lock_key, digest, error, updated.
func (t tx) classifyMany(ctx context.Context, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	text := make([][]string, 9) // id, session_id, state .. reasons, packages .. error
	var iso, updated []int64
	for _, r := range rows {
		// r follows requestCols: id 0, session_id 1, state 4, decision 5, reasons 6,
		// isolated 7, packages 8, lock_key 9, digest 10, error 11, updated 14.
		for i, c := range []int{0, 1, 4, 5, 6, 8, 9, 10, 11} {
			text[i] = append(text[i], fmt.Sprint(r[c]))
		}
		iso = append(iso, int64(r[7].(int)))
		updated = append(updated, r[14].(int64))
	}
	res, err := t.exec(ctx, t.s.d.ClassifyMany, text[0], text[1], text[2], text[3], text[4], iso,
		text[5], text[6], text[7], text[8], updated)
	if err != nil {
		return fmt.Errorf("classifying %d requests: %w", len(rows), err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("classifying %d requests: %w", len(rows), err)
	} else if n != int64(len(rows)) {
		return fmt.Errorf("classifying %d requests: %w: %d were classifying", len(rows), errRefused, n)
	}
	return nil
}
