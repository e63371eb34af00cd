package sqlstore

import (
	"reflect"
	"strings"
	"testing"
)

// TestInsertManyShapes: with Dialect.Arrays any number of rows is one statement of one
// text, each column an array in the rows' order; without, VALUES lists of maxRows.
func TestInsertManyShapes(t *testing.T) {
	rows := func(n int) [][]any {
		out := make([][]any, n)
		for i := range out {
			out[i] = []any{"s", "ext", "sha256:d", "ref", "req", int64(i)}
		}
		return out
	}
	arrays := &Store{d: &Dialect{Arrays: true}}
	var text string
	for _, n := range []int{1, 7, 3 * maxRows} {
		st := arrays.insertMany(nil, "inserting bindings", bindingsTable, rows(n))
		if len(st) != 1 {
			t.Fatalf("%d rows: %d statements, want 1", n, len(st))
		}
		if text == "" {
			text = st[0].query
		} else if st[0].query != text {
			t.Errorf("%d rows: statement %q, want the same text as for 1 row, %q", n, st[0].query, text)
		}
		if len(st[0].args) != 6 {
			t.Fatalf("%d rows: %d arguments, want one per column", n, len(st[0].args))
		}
		if got := st[0].args[5].([]int64); len(got) != n || got[n-1] != int64(n-1) {
			t.Errorf("%d rows: created column %v, want 0..%d in order", n, got, n-1)
		}
		if got := st[0].args[1].([]string); !reflect.DeepEqual(got[:1], []string{"ext"}) || len(got) != n {
			t.Errorf("%d rows: kind column %v", n, got)
		}
	}
	if !strings.Contains(text, "unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::bigint[])") {
		t.Errorf("statement %q does not bind one typed array per column", text)
	}
	values := &Store{d: &Dialect{}}
	if st := values.insertMany(nil, "inserting bindings", bindingsTable, rows(2*maxRows+1)); len(st) != 3 {
		t.Errorf("without arrays, %d rows made %d statements, want 3", 2*maxRows+1, len(st))
	}
	if st := arrays.insertMany(nil, "inserting bindings", bindingsTable, nil); len(st) != 0 {
		t.Errorf("no rows made %d statements", len(st))
	}
}
