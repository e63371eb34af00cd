package client_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/client"
)

// TestPages: the page calls give next_cursor until the list ends, and the whole-list
// calls follow it.
func TestPages(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var want []string
	for range 5 {
		cs, err := e.owner.CreateSession(ctx, client.NewSession{})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, cs.Session.ID)
	}
	var got []string
	p := client.Page{Limit: 2}
	for i := 0; ; i++ {
		l, next, err := e.admin.SessionsPage(ctx, "alice", p)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range l {
			got = append(got, s.ID)
		}
		if next == "" {
			break
		}
		if i > 5 {
			t.Fatal("paging does not end")
		}
		p.Cursor = next
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pages of 2 = %v, want %v", got, want)
	}
	if l, _, err := e.other.SessionsPage(ctx, "", client.Page{}); err != nil || len(l) != 0 {
		t.Errorf("bob's sessions = %v, %v; want none", l, err)
	}
	if _, _, err := e.other.SessionsPage(ctx, "alice", client.Page{}); err == nil {
		t.Error("bob listed alice's sessions")
	}

	ev, next, err := e.admin.AuditPage(ctx, client.Filter{Action: "session.create"}, client.Page{Limit: 3, Desc: true})
	if err != nil || len(ev) != 3 || next == "" || ev[0].SessionID != want[4] {
		t.Errorf("newest 3 session.create events = %+v, %q, %v", ev, next, err)
	}
	all, err := e.admin.Audit(ctx, "")
	creates := 0
	for _, x := range all {
		if x.Action == "session.create" {
			creates++
		}
	}
	if err != nil || creates != 5 {
		t.Errorf("Audit = %d session.create events, %v; want 5", creates, err)
	}
	if rs, _, err := e.owner.RequestsPage(ctx, client.Filter{State: broker.StatePending}, client.Page{Limit: 1}); err != nil || len(rs) != 0 {
		t.Errorf("RequestsPage = %v, %v", rs, err)
	}
}
