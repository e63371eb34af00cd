package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// pageAll reads every page of a list of limit rows, calling between(page) after each
// page (to add rows while paging), and returns the IDs in the order read. It fails on a
// page longer than limit and on an ID read twice.
func pageAll[T any](t *testing.T, limit int, list func(after T, first bool) []T, id func(T) string, between func(int)) []string {
	t.Helper()
	var ids []string
	seen := map[string]bool{}
	var last T
	for p := 0; ; p++ {
		l := list(last, p == 0)
		if len(l) > limit {
			t.Fatalf("page %d has %d rows, limit %d", p, len(l), limit)
		}
		for _, x := range l {
			if seen[id(x)] {
				t.Fatalf("page %d repeats %s", p, id(x))
			}
			seen[id(x)] = true
			ids = append(ids, id(x))
		}
		if len(l) < limit {
			return ids
		}
		last = l[len(l)-1]
		between(p)
		if p > 1000 {
			t.Fatal("paging does not end")
		}
	}
}

func seq(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%03d", prefix, i))
	}
	return out
}

func reversed(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[len(s)-1-i] = x
	}
	return out
}

// testSessionsPaging pages through sessions while more are created: every session that
// existed at the start or was created after it (later Created) is read exactly once, in
// order. Two sessions share each Created time, so the ID breaks ties.
func testSessionsPaging(t *testing.T, s broker.Store) {
	ctx := context.Background()
	for i := range 23 {
		owner := "alice"
		if i%3 == 0 {
			owner = "bob"
		}
		must(t, s.CreateSession(ctx, session(fmt.Sprintf("s%03d", i), owner, i/2)))
	}
	added := 23
	got := pageAll(t, 5, func(after broker.Session, first bool) []broker.Session {
		f := broker.SessionFilter{Limit: 5}
		if !first {
			f.After = broker.Key{Time: after.Created, ID: after.ID}
		}
		l, err := s.Sessions(ctx, f)
		must(t, err)
		return l
	}, func(x broker.Session) string { return x.ID }, func(int) {
		must(t, s.CreateSession(ctx, session(fmt.Sprintf("s%03d", added), "carol", 100+added)))
		added++
	})
	same(t, "sessions paged while adding", got, seq("s", 0, added))

	// Newest first, with a filter: bob's sessions before the 20th.
	var want []string
	for i := 0; i < 20; i += 3 {
		want = append(want, fmt.Sprintf("s%03d", i))
	}
	got = pageAll(t, 2, func(after broker.Session, first bool) []broker.Session {
		f := broker.SessionFilter{Owner: "bob", Until: T0.Add(10 * time.Second), Desc: true, Limit: 2}
		if !first {
			f.After = broker.Key{Time: after.Created, ID: after.ID}
		}
		l, err := s.Sessions(ctx, f)
		must(t, err)
		return l
	}, func(x broker.Session) string { return x.ID }, func(int) {})
	same(t, "bob's sessions before T0+10s, newest first", got, reversed(want))

	for _, tc := range []struct {
		f    broker.SessionFilter
		want []string
	}{
		{broker.SessionFilter{Since: T0.Add(10 * time.Second), Until: T0.Add(11 * time.Second)}, []string{"s020", "s021"}},
		{broker.SessionFilter{Owner: "carol", Limit: 2}, []string{"s023", "s024"}},
		{broker.SessionFilter{Owner: "dave"}, nil},
		{broker.SessionFilter{Since: T0.Add(time.Hour)}, nil},
	} {
		l, err := s.Sessions(ctx, tc.f)
		must(t, err)
		var ids []string
		for _, x := range l {
			ids = append(ids, x.ID)
		}
		same(t, fmt.Sprintf("Sessions(%+v)", tc.f), ids, tc.want)
	}
}

// testRequestsPaging pages through requests while more are filed, and checks each filter.
func testRequestsPaging(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("a1", "alice", 0)))
	must(t, s.CreateSession(ctx, session("b1", "bob", 0)))
	for i := range 17 {
		st, sid := broker.StatePending, "a1"
		if i%2 == 1 {
			st, sid = broker.StateBound, "b1"
		}
		must(t, s.CreateRequest(ctx, request(fmt.Sprintf("r%03d", i), sid, st, i/3)))
	}
	added := 17
	list := func(f broker.RequestFilter) func(broker.Request, bool) []broker.Request {
		return func(after broker.Request, first bool) []broker.Request {
			if !first {
				f.After = broker.Key{Time: after.Created, ID: after.ID}
			}
			l, err := s.ListRequests(ctx, f)
			must(t, err)
			return l
		}
	}
	id := func(r broker.Request) string { return r.ID }
	got := pageAll(t, 4, list(broker.RequestFilter{Limit: 4}), id, func(int) {
		must(t, s.CreateRequest(ctx, request(fmt.Sprintf("r%03d", added), "a1", broker.StatePending, 100+added)))
		added++
	})
	same(t, "requests paged while adding", got, seq("r", 0, added))

	var bobs []string
	for i := 1; i < 17; i += 2 {
		bobs = append(bobs, fmt.Sprintf("r%03d", i))
	}
	got = pageAll(t, 3, list(broker.RequestFilter{Owner: "bob", State: broker.StateBound, Desc: true, Limit: 3}), id, func(int) {})
	same(t, "bob's bound requests, newest first", got, reversed(bobs))
	got = pageAll(t, 3, list(broker.RequestFilter{SessionID: "b1", Limit: 3}), id, func(int) {})
	same(t, "session b1's requests", got, bobs)

	// What changed since a version: one old request moves on.
	must(t, s.UpdateRequest(ctx, "r000", func(r *broker.Request) error {
		r.State, r.Updated = broker.StateDenied, T0.Add(time.Hour)
		return nil
	}))
	before := time.Now()
	// A change that leaves Updated alone moves it all the same, to the store's clock.
	must(t, s.UpdateRequest(ctx, "r002", func(r *broker.Request) error { r.Error = "x"; return nil }))
	for _, tc := range []struct {
		f    broker.RequestFilter
		want []string
	}{
		{broker.RequestFilter{UpdatedSince: T0.Add(time.Hour)}, []string{"r000", "r002"}},
		{broker.RequestFilter{UpdatedSince: T0.Add(time.Hour + 1)}, []string{"r002"}},
		{broker.RequestFilter{UpdatedSince: before.Add(-time.Second), State: broker.StatePending}, []string{"r002"}},
		{broker.RequestFilter{UpdatedSince: before.Add(time.Hour)}, nil},
		{broker.RequestFilter{Since: T0.Add(time.Second), Until: T0.Add(2 * time.Second)}, []string{"r003", "r004", "r005"}},
		{broker.RequestFilter{Owner: "alice", State: broker.StateDenied}, []string{"r000"}},
		{broker.RequestFilter{Owner: "carol"}, nil},
	} {
		l, err := s.ListRequests(ctx, tc.f)
		must(t, err)
		var ids []string
		for _, x := range l {
			ids = append(ids, x.ID)
		}
		same(t, fmt.Sprintf("ListRequests(%+v)", tc.f), ids, tc.want)
	}
}

// testAuditPaging pages through the audit log while events are appended, and checks
// each filter.
func testAuditPaging(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("a1", "alice", 0)))
	must(t, s.CreateSession(ctx, session("b1", "bob", 0)))
	ev := func(i int) broker.AuditEvent {
		e := broker.AuditEvent{Time: T0.Add(time.Duration(i) * time.Minute), Actor: "x", Action: "request",
			SessionID: "a1", Detail: fmt.Sprintf("e%03d", i)}
		if i%4 == 0 {
			e.Action, e.SessionID = "approve", "b1"
		}
		return e
	}
	for i := range 19 {
		must(t, s.Audit(ctx, ev(i)))
	}
	added := 19
	list := func(f broker.AuditFilter) func(broker.AuditEvent, bool) []broker.AuditEvent {
		return func(after broker.AuditEvent, first bool) []broker.AuditEvent {
			if !first {
				f.AfterID = after.ID
			}
			l, err := s.AuditEvents(ctx, f)
			must(t, err)
			return l
		}
	}
	detail := func(e broker.AuditEvent) string { return e.Detail }
	got := pageAll(t, 6, list(broker.AuditFilter{Limit: 6}), detail, func(int) {
		must(t, s.Audit(ctx, ev(added)))
		added++
	})
	same(t, "audit paged while appending", got, seq("e", 0, added))

	var approvals []string
	for i := 0; i < added; i += 4 {
		approvals = append(approvals, fmt.Sprintf("e%03d", i))
	}
	got = pageAll(t, 2, list(broker.AuditFilter{Action: "approve", Desc: true, Limit: 2}), detail, func(int) {})
	same(t, "approvals, newest first", got, reversed(approvals))
	got = pageAll(t, 2, list(broker.AuditFilter{Owner: "bob", Limit: 2}), detail, func(int) {})
	same(t, "events of bob's sessions", got, approvals)
	got = pageAll(t, 100, list(broker.AuditFilter{SessionID: "a1", Since: T0.Add(5 * time.Minute), Until: T0.Add(8 * time.Minute), Limit: 100}), detail, func(int) {})
	same(t, "a1's events in [5m, 8m)", got, []string{"e005", "e006", "e007"})
	got = pageAll(t, 100, list(broker.AuditFilter{Owner: "carol", Limit: 100}), detail, func(int) {})
	same(t, "events of carol's sessions", got, []string(nil))
}

// testPruneAudit prunes by age: older events go, the prune is audited in the same
// transaction, the horizon never moves back, and the database still refuses to delete
// anything at or after it.
func testPruneAudit(t *testing.T, s broker.Store) {
	ctx := context.Background()
	for i := range 5 {
		must(t, s.Audit(ctx, broker.AuditEvent{Time: T0.Add(time.Duration(i) * time.Hour), Actor: "x", Action: "request", Detail: fmt.Sprint(i)}))
	}
	prune := broker.AuditEvent{Time: T0.Add(10 * time.Hour), Actor: "broker", Action: "audit.prune"}
	n, err := s.PruneAudit(ctx, T0.Add(150*time.Minute), prune)
	must(t, err)
	if n != 3 {
		t.Errorf("PruneAudit removed %d events, want 3 (those before 2h30m)", n)
	}
	l, err := s.AuditEvents(ctx, broker.AuditFilter{})
	must(t, err)
	var got []string
	for _, e := range l {
		got = append(got, e.Action+":"+e.Detail)
	}
	if len(got) != 3 || got[0] != "request:3" || got[1] != "request:4" || !strings.HasPrefix(got[2], "audit.prune:removed 3 events before ") {
		t.Errorf("after pruning: %q, want request:3, request:4 and the audit.prune event", got)
	}
	// An earlier horizon deletes nothing more and does not move the horizon back.
	n, err = s.PruneAudit(ctx, T0, prune)
	must(t, err)
	if n != 0 {
		t.Errorf("pruning before an earlier time removed %d events", n)
	}
	sq, ok := s.(SQLStore)
	if !ok {
		return
	}
	for _, q := range []string{`DELETE FROM audit`, `UPDATE audit_horizon SET cutoff = 0`, `DELETE FROM audit_horizon`} {
		if _, err := sq.DB().ExecContext(ctx, q); err == nil {
			t.Errorf("%s after a prune: succeeded; it must be refused", q)
		}
	}
	if l, _ := s.AuditEvents(ctx, broker.AuditFilter{}); len(l) != 4 {
		t.Errorf("audit log after refused deletes: %d events, want 4", len(l))
	}
}
