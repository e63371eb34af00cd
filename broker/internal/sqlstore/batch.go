package sqlstore

import (
	"fmt"
	"strings"

	"github.com/pylayer/pylayer/broker"
)

// later is the rows the writes of a group commit's batch append, inserted together at
// the batch's end (deferred): requests first, then classifications, bindings and audit
// events, each in as few statements as insertMany makes, then the notifications. Nothing
// in a write reads back what it appends, and a write never sees another's (they are
// concurrent callers'), so only the round trips change. A batch whose writes ran no
// statement of their own sends all of it as one Dialect.Pipeline: one round trip for the
// batch, begin to commit (runBatch). A lone write goes the same way (group.go), so the first of a burst, which
// every write that follows waits behind, costs one round trip, not six.
//
// The rows go in without ON CONFLICT and without reading their session first: a
// duplicate request ID or a missing session fails the statement and so the batch, and
// the group runs each write again alone (commitAll), with the checks that name the
// cause. Request IDs are random, and the server reads the session before it asks.
//
// Classifications (Store.Classified, with Dialect.ClassifyMany) go in one statement after
// the requests: each changes its request only if it is classifying in its session, and if
// fewer rows changed than were classified the statement fails, and so the batch, in the
// same way: each write, alone, learns which request had moved on (another replica
// classified it first).
type later struct {
	requests, bindings, audit [][]any
	classified                [][]any // requestArgs of each classification
}

// deferredStmt is a statement a transaction runs after its writes.
type deferredStmt struct {
	what, query string
	args        []any
}

// Stmt is a statement for Dialect.Pipeline, its placeholders the dialect's.
type Stmt struct {
	Query string
	Args  []any
}

// deferred returns the statements the transaction's writes left for its end: the rows
// they appended (a batch's), then the notifications.
func (t tx) deferred() []deferredStmt {
	var out []deferredStmt
	if l := t.later; l != nil {
		out = t.s.insertMany(out, "inserting requests", requestsTable, l.requests)
		if len(l.classified) > 0 && t.s.d.ClassifyMany != "" {
			out = append(out, classifyMany(t.s.d.ClassifyMany, l.classified))
		}
		out = t.s.insertMany(out, "inserting bindings", bindingsTable, l.bindings)
		out = t.s.insertMany(out, "inserting audit events", auditTable, l.audit)
		*l = later{}
	}
	if n := t.notifyStmt(); n != nil {
		out = append(out, *n)
	}
	return out
}

// table is what a multi-row insert needs of a table: its columns, the PostgreSQL type of
// each (for Dialect.Arrays): "text" or "bigint" (an int or int64 argument), and the
// array insert's text, built once (newTable).
type table struct {
	into   string // INSERT INTO name (columns)
	types  []string
	arrays string // into SELECT * FROM unnest(?::type[], ...)
}

func newTable(into string, types ...string) table {
	cols := make([]string, len(types))
	for i, typ := range types {
		cols[i] = "?::" + typ + "[]"
	}
	return table{into: into, types: types, arrays: into + ` SELECT * FROM unnest(` + strings.Join(cols, ", ") + `)`}
}

var (
	requestsTable = newTable(`INSERT INTO requests (`+requestCols+`)`, "text", "text", "text", "text", "text",
		"text", "text", "bigint", "text", "text", "text", "text", "text", "bigint", "bigint")
	bindingsTable = newTable(`INSERT INTO bindings (session_id, kind, digest, ref, request_id, created)`,
		"text", "text", "text", "text", "text", "bigint")
	auditTable = newTable(`INSERT INTO audit (time, actor, action, session_id, request_id, packages, decision, detail)`,
		"bigint", "text", "text", "text", "text", "text", "text", "text")
)

// insertMany appends to out the inserts of rows (each in tb's column order) into tb. With
// Dialect.Arrays that is one statement, whatever the count, binding one array per column:
// a single statement text, which the driver prepares once per connection and the server
// plans without parsing a thousand placeholders. A VALUES list of n rows is a text of its
// own for each n: measured in a burst on PostgreSQL, nearly every batch of a group commit
// paid a prepare round trip for its inserts. Without, maxRows rows to a VALUES list.
func (s *Store) insertMany(out []deferredStmt, what string, tb table, rows [][]any) []deferredStmt {
	if len(rows) == 0 {
		return out
	}
	if s.d.Arrays {
		return append(out, arrayInsert(what, tb, rows))
	}
	for len(rows) > 0 {
		n := min(len(rows), maxRows)
		args := make([]any, 0, n*len(rows[0]))
		for _, r := range rows[:n] {
			args = append(args, r...)
		}
		out = append(out, deferredStmt{what: fmt.Sprintf("%s (%d)", what, n), query: tb.into + ` VALUES ` + values(n, len(rows[0])), args: args})
		rows = rows[n:]
	}
	return out
}

// arrayInsert is the insert of rows into tb as INSERT ... SELECT * FROM unnest(arrays),
// which keeps the rows' order.
func arrayInsert(what string, tb table, rows [][]any) deferredStmt {
	args := make([]any, len(tb.types))
	for i, typ := range tb.types {
		if typ == "bigint" {
			col := make([]int64, len(rows))
			for j, r := range rows {
				col[j] = intArg(r[i])
			}
			args[i] = col
			continue
		}
		col := make([]string, len(rows))
		for j, r := range rows {
			col[j] = textArg(r[i])
		}
		args[i] = col
	}
	return deferredStmt{what: fmt.Sprintf("%s (%d)", what, len(rows)), query: tb.arrays, args: args}
}

// intArg is an integer argument of a row as an int64.
func intArg(v any) int64 {
	switch v := v.(type) {
	case int:
		return int64(v)
	case int64:
		return v
	}
	panic(fmt.Sprintf("sqlstore: %T is not an integer column's argument", v))
}

// classifiedText is where classifyMany's text columns are in a row of requestArgs (which
// follows requestCols): id 0, session_id 1, state 4, decision 5, reasons 6, packages 8,
// lock_key 9, digest 10, error 11; isolated is 7 and updated 14.
var classifiedText = [...]int{0, 1, 4, 5, 6, 8, 9, 10, 11}

// textArg is a text argument of requestArgs as a string.
func textArg(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case broker.State:
		return string(v)
	}
	return fmt.Sprint(v)
}

// classifyMany is the batch's classifications in one statement, Dialect.ClassifyMany,
// whose parameters are one array per column (id, session_id, state, decision, reasons,
// isolated, packages, lock_key, digest, error, updated) and the count it must change.
func classifyMany(query string, rows [][]any) deferredStmt {
	text := make([][]string, len(classifiedText))
	for i := range text {
		text[i] = make([]string, 0, len(rows))
	}
	iso, updated := make([]int64, 0, len(rows)), make([]int64, 0, len(rows))
	for _, r := range rows {
		for i, c := range classifiedText {
			text[i] = append(text[i], textArg(r[c]))
		}
		iso = append(iso, int64(r[7].(int)))
		updated = append(updated, r[14].(int64))
	}
	return deferredStmt{what: fmt.Sprintf("classifying %d requests", len(rows)), query: query,
		args: []any{text[0], text[1], text[2], text[3], text[4], iso, text[5], text[6], text[7], text[8], updated,
			int64(len(rows))}}
}
