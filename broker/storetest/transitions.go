package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// snapshot is everything a store holds about one session, to check that a refused or
// failed change left it as it was.
type snapshot struct {
	Session  broker.Session
	Bindings []broker.Binding
	Requests []broker.Request
	Audit    []broker.AuditEvent
	AllAudit int
}

func take(t *testing.T, s broker.Store, sessionID string) snapshot {
	t.Helper()
	ctx := context.Background()
	var sn snapshot
	var err error
	if sn.Session, err = s.GetSession(ctx, sessionID); err != nil && !errors.Is(err, broker.ErrNotFound) {
		t.Fatal(err)
	}
	if sn.Bindings, err = s.Bindings(ctx, sessionID); err != nil {
		t.Fatal(err)
	}
	if sn.Requests, err = s.ListRequests(ctx, broker.RequestFilter{SessionID: sessionID}); err != nil {
		t.Fatal(err)
	}
	if sn.Audit, err = s.AuditLog(ctx, sessionID); err != nil {
		t.Fatal(err)
	}
	all, err := s.AuditLog(ctx, "")
	must(t, err)
	sn.AllAudit = len(all)
	return sn
}

func event(action, sessionID, requestID string) broker.AuditEvent {
	return broker.AuditEvent{Time: T0, Actor: "tester", Action: action, SessionID: sessionID, RequestID: requestID}
}

// testCreateAudited: the creates append their events with them, or refuse both.
func testCreateAudited(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0), event("session.create", "s1", "")))
	must(t, s.CreateRequest(ctx, request("r1", "s1", broker.StatePending, 1), event("request.create", "s1", "r1")))
	must(t, s.PutToken(ctx, broker.Token{Hash: "h1", Role: broker.RoleOwner, Subject: "alice", Created: T0}, event("token.create", "", "")))
	l, err := s.AuditLog(ctx, "")
	must(t, err)
	var actions []string
	for _, e := range l {
		actions = append(actions, e.Action)
	}
	same(t, "audited creates", actions, []string{"session.create", "request.create", "token.create"})

	bad := broker.AuditEvent{Action: "x"} // no actor: the whole change is refused
	wantErr(t, "session with a bad event", s.CreateSession(ctx, session("s2", "bob", 0), bad), broker.ErrInvalid)
	wantErr(t, "request with a bad event", s.CreateRequest(ctx, request("r2", "s1", broker.StatePending, 2), bad), broker.ErrInvalid)
	wantErr(t, "token with a bad event", s.PutToken(ctx, broker.Token{Hash: "h2", Role: broker.RoleOwner, Subject: "bob"}, bad), broker.ErrInvalid)
	_, err = s.GetSession(ctx, "s2")
	wantErr(t, "session after a refused event", err, broker.ErrNotFound)
	_, err = s.GetRequest(ctx, "r2")
	wantErr(t, "request after a refused event", err, broker.ErrNotFound)
	_, err = s.GetToken(ctx, "h2")
	wantErr(t, "token after a refused event", err, broker.ErrNotFound)
	l, _ = s.AuditLog(ctx, "")
	if len(l) != 3 {
		t.Errorf("refused changes appended events: %+v", l)
	}
}

func testTransition(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	must(t, s.CreateRequest(ctx, request("r1", "s1", broker.StatePending, 0)))
	must(t, s.Transition(ctx, "r1", func(r *broker.Request) (broker.AuditEvent, error) {
		r.State, r.Decision, r.Approver = broker.StateApproved, broker.DecisionApproved, "bob"
		return broker.AuditEvent{Time: T0, Actor: "bob", Action: "request.approved", SessionID: r.SessionID, RequestID: r.ID, Decision: r.Decision}, nil
	}))
	got, _ := s.GetRequest(ctx, "r1")
	if got.State != broker.StateApproved || got.Approver != "bob" {
		t.Errorf("after Transition: %+v", got)
	}
	l, _ := s.AuditLog(ctx, "s1")
	if len(l) != 1 || l[0].Action != "request.approved" || l[0].Decision != broker.DecisionApproved {
		t.Errorf("audit after Transition: %+v", l)
	}

	before := take(t, s, "s1")
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		fn   func(*broker.Request) (broker.AuditEvent, error)
		want error
	}{
		{"fn fails", func(r *broker.Request) (broker.AuditEvent, error) {
			r.State = broker.StateDenied
			return event("request.denied", "s1", "r1"), boom
		}, boom},
		{"event without actor", func(r *broker.Request) (broker.AuditEvent, error) {
			r.State = broker.StateDenied
			return broker.AuditEvent{Action: "request.denied"}, nil
		}, broker.ErrInvalid},
		{"bad state", func(r *broker.Request) (broker.AuditEvent, error) {
			r.State = "exploded"
			return event("request.exploded", "s1", "r1"), nil
		}, broker.ErrInvalid},
	} {
		wantErr(t, tc.name, s.Transition(ctx, "r1", tc.fn), tc.want)
		same(t, tc.name+": store after", take(t, s, "s1"), before)
	}
	wantErr(t, "missing", s.Transition(ctx, "nope", func(*broker.Request) (broker.AuditEvent, error) {
		return event("x", "", ""), nil
	}), broker.ErrNotFound)
}

func testBind(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	must(t, s.CreateSession(ctx, session("s2", "bob", 0)))
	must(t, s.CreateRequest(ctx, request("r1", "s1", broker.StateBuilding, 0)))
	must(t, s.CreateRequest(ctx, request("pend", "s1", broker.StatePending, 1)))
	b := broker.Binding{SessionID: "s1", Kind: broker.KindExt, Digest: "sha256:0b", Ref: "r@sha256:0b", RequestID: "r1", Created: T0}

	before := take(t, s, "s1")
	for _, tc := range []struct {
		name string
		b    broker.Binding
		want error
	}{
		{"pending request", broker.Binding{SessionID: "s1", Kind: broker.KindExt, Digest: "sha256:0b", RequestID: "pend"}, broker.ErrConflict},
		{"missing request", broker.Binding{SessionID: "s1", Kind: broker.KindExt, Digest: "sha256:0b", RequestID: "nope"}, broker.ErrNotFound},
		{"another session's request", broker.Binding{SessionID: "s2", Kind: broker.KindExt, Digest: "sha256:0b", RequestID: "r1"}, broker.ErrInvalid},
		{"no request", broker.Binding{SessionID: "s1", Kind: broker.KindExt, Digest: "sha256:0b"}, broker.ErrInvalid},
		{"no digest", broker.Binding{SessionID: "s1", Kind: broker.KindExt, RequestID: "r1"}, broker.ErrInvalid},
	} {
		wantErr(t, tc.name, s.Bind(ctx, tc.b, "key", event("bound", tc.b.SessionID, tc.b.RequestID)), tc.want)
		same(t, tc.name+": store after", take(t, s, "s1"), before)
	}
	wantErr(t, "event without actor", s.Bind(ctx, b, "key", broker.AuditEvent{Action: "bound"}), broker.ErrInvalid)
	same(t, "event without actor: store after", take(t, s, "s1"), before)

	must(t, s.Bind(ctx, b, "key-1", event("bound", "s1", "r1")))
	got, _ := s.GetRequest(ctx, "r1")
	if got.State != broker.StateBound || got.Digest != "sha256:0b" || got.LockKey != "key-1" {
		t.Errorf("after Bind: state %s digest %s key %s", got.State, got.Digest, got.LockKey)
	}
	bs, _ := s.Bindings(ctx, "s1")
	same(t, "bindings after Bind", bs, []broker.Binding{b})
	l, _ := s.AuditLog(ctx, "s1")
	if len(l) != 1 || l[0].Action != "bound" || l[0].RequestID != "r1" {
		t.Errorf("audit after Bind: %+v", l)
	}
	// Bound is terminal: binding again is refused.
	wantErr(t, "bind twice", s.Bind(ctx, b, "key-1", event("bound", "s1", "r1")), broker.ErrConflict)
	bs, _ = s.Bindings(ctx, "s1")
	if len(bs) != 1 {
		t.Errorf("a refused second Bind added a binding: %+v", bs)
	}
}

func rebasePlan() broker.RebasePlan {
	now := T0.Add(time.Hour)
	nr := request("new1", "s1", broker.StateApproved, 10)
	return broker.RebasePlan{
		SessionID: "s1", FromBase: "sha256:old",
		Interpreter: "sha256:py2", Base: "sha256:new", BaseLock: []byte(`{"new":1}`),
		Bindings: []broker.Binding{{SessionID: "s1", Kind: broker.KindIso, Digest: "sha256:iso", Ref: "r@sha256:iso", RequestID: "iso1", Created: T0}},
		Requests: []broker.Request{nr},
		Audit: []broker.AuditEvent{
			{Time: now, Actor: "builder", Action: "rebase.request", SessionID: "s1", RequestID: "new1"},
			{Time: now, Actor: "alice", Action: "session.rebase", SessionID: "s1", Detail: "base sha256:old -> sha256:new"},
		},
	}
}

func rebaseFixture(t *testing.T, s broker.Store) {
	ctx := context.Background()
	se := session("s1", "alice", 0)
	se.Interpreter, se.Base, se.BaseLock = "sha256:py1", "sha256:old", []byte(`{"old":1}`)
	must(t, s.CreateSession(ctx, se))
	must(t, s.CreateRequest(ctx, request("ext1", "s1", broker.StateBound, 1)))
	must(t, s.AddBinding(ctx, broker.Binding{SessionID: "s1", Kind: broker.KindExt, Digest: "sha256:ext", RequestID: "ext1", Created: T0}))
	must(t, s.AddBinding(ctx, broker.Binding{SessionID: "s1", Kind: broker.KindIso, Digest: "sha256:iso", Ref: "r@sha256:iso", RequestID: "iso1", Created: T0}))
}

func testApplyRebase(t *testing.T, s broker.Store) {
	ctx := context.Background()
	rebaseFixture(t, s)
	before := take(t, s, "s1")
	for _, tc := range []struct {
		name string
		edit func(*broker.RebasePlan)
		want error
	}{
		{"moved meanwhile", func(p *broker.RebasePlan) { p.FromBase = "sha256:other" }, broker.ErrConflict},
		{"missing session", func(p *broker.RebasePlan) {
			p.SessionID, p.Bindings, p.Requests = "nope", nil, nil
		}, broker.ErrNotFound},
		{"another session's binding", func(p *broker.RebasePlan) { p.Bindings[0].SessionID = "s2" }, broker.ErrInvalid},
		{"a request that exists", func(p *broker.RebasePlan) { p.Requests[0].ID = "ext1" }, broker.ErrConflict},
		{"a bad request", func(p *broker.RebasePlan) { p.Requests[0].State = "" }, broker.ErrInvalid},
		{"a bad event", func(p *broker.RebasePlan) { p.Audit[1].Actor = "" }, broker.ErrInvalid},
	} {
		p := rebasePlan()
		tc.edit(&p)
		wantErr(t, tc.name, s.ApplyRebase(ctx, p), tc.want)
		same(t, tc.name+": store after", take(t, s, "s1"), before)
	}

	p := rebasePlan()
	must(t, s.ApplyRebase(ctx, p))
	after := take(t, s, "s1")
	want := session("s1", "alice", 0)
	want.Interpreter, want.Base, want.BaseLock = p.Interpreter, p.Base, p.BaseLock
	if after.Session.Version <= before.Session.Version {
		t.Errorf("session version after rebase %d, before %d: want it moved", after.Session.Version, before.Session.Version)
	}
	want.Version = after.Session.Version
	same(t, "session after rebase", after.Session, want)
	same(t, "bindings after rebase", after.Bindings, p.Bindings)
	var ids []string
	for _, r := range after.Requests {
		ids = append(ids, r.ID)
	}
	same(t, "requests after rebase", ids, []string{"ext1", "new1"})
	var actions []string
	for _, e := range after.Audit {
		actions = append(actions, e.Action)
	}
	same(t, "audit after rebase", actions, []string{"rebase.request", "session.rebase"})
	// The same plan again: the session is on the new base now.
	wantErr(t, "stale plan", s.ApplyRebase(ctx, rebasePlan()), broker.ErrConflict)
}

// RunFaults checks that a change whose statements fail half-way leaves nothing behind:
// open must return a new, empty store whose connections go through f.
func RunFaults(t *testing.T, open func(f *Faults) broker.Store) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		setup func(*testing.T, broker.Store)
		fail  []string
		do    func(broker.Store) error
	}{
		{"CreateSession, audit fails", nil, []string{"INSERT INTO audit"}, func(s broker.Store) error {
			return s.CreateSession(ctx, session("s1", "alice", 0), event("session.create", "s1", ""))
		}},
		{"CreateRequest, audit fails", func(t *testing.T, s broker.Store) {
			must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
		}, []string{"INSERT INTO audit"}, func(s broker.Store) error {
			return s.CreateRequest(ctx, request("r1", "s1", broker.StatePending, 0), event("request.create", "s1", "r1"))
		}},
		{"Transition, audit fails", func(t *testing.T, s broker.Store) {
			must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
			must(t, s.CreateRequest(ctx, request("r1", "s1", broker.StatePending, 0)))
		}, []string{"INSERT INTO audit"}, func(s broker.Store) error {
			return s.Transition(ctx, "r1", func(r *broker.Request) (broker.AuditEvent, error) {
				r.State = broker.StateApproved
				return event("request.approved", "s1", "r1"), nil
			})
		}},
		{"Bind, binding fails", bindFixture, []string{"INSERT INTO bindings"}, bind},
		{"Bind, audit fails", bindFixture, []string{"INSERT INTO audit"}, bind},
		{"ApplyRebase, re-filing fails", rebaseFixture, []string{"INSERT INTO requests"}, rebase},
		{"ApplyRebase, bindings fail", rebaseFixture, []string{"INSERT INTO bindings"}, rebase},
		{"ApplyRebase, audit fails", rebaseFixture, []string{"INSERT INTO audit"}, rebase},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &Faults{}
			s := open(f)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			if tc.setup != nil {
				tc.setup(t, s)
			}
			before := take(t, s, "s1")
			f.FailOn(tc.fail...)
			err := tc.do(s)
			f.Clear()
			if !errors.Is(err, ErrInjected) {
				t.Fatalf("err = %v, want the injected failure", err)
			}
			same(t, "store after the failure", take(t, s, "s1"), before)
			// And without the fault the same change goes through: the case tests something.
			must(t, tc.do(s))
			if after := take(t, s, "s1"); after.AllAudit <= before.AllAudit {
				t.Errorf("without the fault: %d audit events, want more than %d", after.AllAudit, before.AllAudit)
			}
		})
	}
}

func bindFixture(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	must(t, s.CreateRequest(ctx, request("r1", "s1", broker.StateBuilding, 0)))
}

func bind(s broker.Store) error {
	b := broker.Binding{SessionID: "s1", Kind: broker.KindExt, Digest: "sha256:0b", RequestID: "r1", Created: T0}
	return s.Bind(context.Background(), b, "key", event("bound", "s1", "r1"))
}

func rebase(s broker.Store) error { return s.ApplyRebase(context.Background(), rebasePlan()) }

// testCreateBound: a request created already bound comes with its binding and its audit
// events, in one transaction; anything inconsistent is refused and leaves nothing.
func testCreateBound(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	r := request("r1", "s1", broker.StateBound, 0)
	r.Digest, r.LockKey = "sha256:0b", "key-1"
	b := broker.Binding{SessionID: "s1", Kind: broker.KindExt, Digest: "sha256:0b", Ref: "r@sha256:0b", RequestID: "r1", Created: T0}
	before := take(t, s, "s1")
	for _, tc := range []struct {
		name string
		edit func(r *broker.Request, b *broker.Binding, e *broker.AuditEvent)
		want error
	}{
		{"not bound", func(r *broker.Request, _ *broker.Binding, _ *broker.AuditEvent) { r.State = broker.StateApproved }, broker.ErrInvalid},
		{"binding of another request", func(_ *broker.Request, b *broker.Binding, _ *broker.AuditEvent) { b.RequestID = "r2" }, broker.ErrInvalid},
		{"another digest", func(_ *broker.Request, b *broker.Binding, _ *broker.AuditEvent) { b.Digest = "sha256:0c" }, broker.ErrInvalid},
		{"missing session", func(r *broker.Request, b *broker.Binding, _ *broker.AuditEvent) {
			r.SessionID, b.SessionID = "nope", "nope"
		}, broker.ErrNotFound},
		{"a bad event", func(_ *broker.Request, _ *broker.Binding, e *broker.AuditEvent) { e.Actor = "" }, broker.ErrInvalid},
	} {
		r2, b2, e := r, b, event("bound", "s1", "r1")
		tc.edit(&r2, &b2, &e)
		wantErr(t, tc.name, s.CreateBound(ctx, r2, b2, event("request.create", "s1", "r1"), e), tc.want)
		same(t, tc.name+": store after", take(t, s, "s1"), before)
	}
	must(t, s.CreateBound(ctx, r, b, event("request.create", "s1", "r1"), event("bound", "s1", "r1")))
	got, err := s.GetRequest(ctx, "r1")
	must(t, err)
	if got.State != broker.StateBound || got.Digest != "sha256:0b" || got.LockKey != "key-1" {
		t.Errorf("after CreateBound: state %s digest %s key %s", got.State, got.Digest, got.LockKey)
	}
	bs, _ := s.Bindings(ctx, "s1")
	same(t, "bindings after CreateBound", bs, []broker.Binding{b})
	l, _ := s.AuditLog(ctx, "s1")
	if len(l) != 2 || l[0].Action != "request.create" || l[1].Action != "bound" {
		t.Errorf("audit after CreateBound: %+v", l)
	}
	wantErr(t, "twice", s.CreateBound(ctx, r, b, event("request.create", "s1", "r1")), broker.ErrConflict)
}

// testClassified: a classifying request takes its classification, with its binding when
// it is bound at once and its audit event, in one transaction; a request that is not
// classifying (another replica classified it first) or a malformed classification is
// refused and changes nothing.
func testClassified(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	for _, id := range []string{"r1", "r2", "r3"} {
		r := request(id, "s1", broker.StateClassifying, 0)
		r.Error = "the index did not answer; retrying"
		must(t, s.CreateRequest(ctx, r, event("request.create", "s1", id)))
	}
	must(t, s.CreateRequest(ctx, request("done", "s1", broker.StatePending, 0)))
	pkgs := []broker.Pkg{{Name: "foo", Version: "1.0", Filename: "foo-1.0-py3-none-any.whl", SHA256: "ab", Size: 3}}
	decided := func(id string, st broker.State) broker.Request {
		r := request(id, "s1", st, 0)
		r.Decision, r.Reasons, r.Packages, r.LockKey, r.Isolated = "auto-approved", []string{"foo is allowlisted"}, pkgs, "key-1", true
		return r
	}
	b := broker.Binding{SessionID: "s1", Kind: broker.KindExt, Digest: "sha256:0b", Ref: "r@sha256:0b", RequestID: "r2", Created: T0}
	bound := decided("r2", broker.StateBound)
	bound.Digest = b.Digest
	before := take(t, s, "s1")
	for _, tc := range []struct {
		name string
		r    broker.Request
		b    *broker.Binding
		e    broker.AuditEvent
		want error
	}{
		{"not classifying", decided("done", broker.StateApproved), nil, event("request.classify", "s1", "done"), broker.ErrConflict},
		{"no such request", decided("nope", broker.StateApproved), nil, event("request.classify", "s1", "nope"), broker.ErrNotFound},
		{"to building", decided("r1", broker.StateBuilding), nil, event("request.classify", "s1", "r1"), broker.ErrInvalid},
		{"approved with a binding", decided("r1", broker.StateApproved), &b, event("request.classify", "s1", "r1"), broker.ErrInvalid},
		{"bound without one", bound, nil, event("request.classify", "s1", "r2"), broker.ErrInvalid},
		{"a bad event", decided("r1", broker.StateApproved), nil, broker.AuditEvent{Action: "request.classify"}, broker.ErrInvalid},
	} {
		wantErr(t, tc.name, s.Classified(ctx, tc.r, tc.b, tc.e), tc.want)
		same(t, tc.name+": store after", take(t, s, "s1"), before)
	}
	must(t, s.Classified(ctx, decided("r1", broker.StateApproved), nil, event("request.classify", "s1", "r1")))
	must(t, s.Classified(ctx, bound, &b, event("request.classify", "s1", "r2")))
	rej := decided("r3", broker.StateRejected)
	rej.Decision, rej.Reasons = "rejected", []string{"sdist only"}
	must(t, s.Classified(ctx, rej, nil, event("request.classify", "s1", "r3")))
	for id, want := range map[string]broker.State{"r1": broker.StateApproved, "r2": broker.StateBound, "r3": broker.StateRejected} {
		got, err := s.GetRequest(ctx, id)
		must(t, err)
		if got.State != want || got.Error != "" || got.Decision == "" || len(got.Reasons) != 1 || got.Created != T0 || !got.Updated.After(T0) {
			t.Errorf("%s after Classified: %+v, want %s, its decision and reasons, no error, Updated moved", id, got, want)
		}
		if id != "r3" && (!slices.Equal(got.Packages, pkgs) || got.LockKey != "key-1" || !got.Isolated) {
			t.Errorf("%s after Classified: packages %v key %q isolated %v", id, got.Packages, got.LockKey, got.Isolated)
		}
	}
	if got, _ := s.GetRequest(ctx, "r2"); got.Digest != b.Digest {
		t.Errorf("bound at classification: digest %q, want %s", got.Digest, b.Digest)
	}
	bs, _ := s.Bindings(ctx, "s1")
	same(t, "bindings after Classified", bs, []broker.Binding{b})
	l, _ := s.AuditLog(ctx, "s1")
	if n := len(l) - len(before.Audit); n != 3 || l[len(l)-1].Action != "request.classify" {
		t.Errorf("audit after Classified: %d new events, want 3 request.classify: %+v", n, l)
	}
	wantErr(t, "twice", s.Classified(ctx, decided("r1", broker.StatePending), nil, event("request.classify", "s1", "r1")), broker.ErrConflict)
}

// testClassifiedConcurrent: classifications arriving at once (a crowd's, which a store
// may apply together) each get the outcome they would alone: the first of two for one
// request wins and the other is refused as a conflict, one for a request that moved on is
// a conflict, one naming another session is invalid; what won is stored with its
// binding and event, and what lost left nothing.
func testClassifiedConcurrent(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	must(t, s.CreateSession(ctx, session("s2", "bob", 0)))
	const n = 60
	for i := range n {
		must(t, s.CreateRequest(ctx, request(fmt.Sprintf("c%02d", i), "s1", broker.StateClassifying, i)))
	}
	for i := range 8 {
		must(t, s.CreateRequest(ctx, request(fmt.Sprintf("done%d", i), "s1", broker.StatePending, i)))
	}
	pkgs := []broker.Pkg{{Name: "foo", Version: "1.0", Filename: "foo-1.0-py3-none-any.whl", SHA256: "ab", Size: 3}}
	type call struct {
		r    broker.Request
		b    *broker.Binding
		want error // nil, ErrConflict, ErrInvalid, or errTwice: one of a pair wins
	}
	errTwice := errors.New("one of two wins")
	decided := func(id, session string, i int) (broker.Request, *broker.Binding) {
		r := request(id, session, broker.StateApproved, i)
		r.Decision, r.Reasons, r.Packages, r.LockKey = "auto-approved", []string{fmt.Sprint("reason ", i)}, pkgs, fmt.Sprint("key-", i)
		r.Isolated = i%2 == 0
		switch i % 3 {
		case 1:
			r.State, r.Digest = broker.StateBound, fmt.Sprintf("sha256:%02x", i)
			return r, &broker.Binding{SessionID: session, Kind: broker.KindExt, Digest: r.Digest, Ref: "r@" + r.Digest, RequestID: id, Created: T0}
		case 2:
			r.State = broker.StateRejected
		}
		return r, nil
	}
	var calls []call
	for i := range n {
		r, b := decided(fmt.Sprintf("c%02d", i), "s1", i)
		want := error(nil)
		if i < 10 {
			want = errTwice
			r2, b2 := decided(r.ID, "s1", i+100)
			calls = append(calls, call{r2, b2, errTwice})
		}
		calls = append(calls, call{r, b, want})
	}
	for i := range 8 {
		r, b := decided(fmt.Sprintf("done%d", i), "s1", i)
		calls = append(calls, call{r, b, broker.ErrConflict})
	}
	for i := 50; i < 55; i++ { // another session's request: refused, and c50-c54 still classify
		r, b := decided(fmt.Sprintf("c%02d", i), "s2", i)
		calls = append(calls, call{r, b, broker.ErrInvalid})
	}
	before2 := take(t, s, "s2")
	errs := make([]error, len(calls))
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for k, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			errs[k] = s.Classified(ctx, c.r, c.b, event("request.classify", c.r.SessionID, c.r.ID))
		}()
	}
	close(gate)
	wg.Wait()

	won := map[string]call{}
	for k, c := range calls {
		switch {
		case c.want == errTwice && errs[k] == nil:
			if _, dup := won[c.r.ID]; dup {
				t.Errorf("%s: both classifications of one request succeeded", c.r.ID)
			}
			won[c.r.ID] = c
		case c.want == errTwice:
			wantErr(t, c.r.ID+" (the second of two)", errs[k], broker.ErrConflict)
		case c.want == nil:
			if errs[k] != nil {
				t.Errorf("%s: %v", c.r.ID, errs[k])
			}
			won[c.r.ID] = c
		default:
			wantErr(t, c.r.ID+" in "+c.r.SessionID, errs[k], c.want)
		}
	}
	if len(won) != n {
		t.Fatalf("%d requests classified, want %d", len(won), n)
	}
	var wantBindings []string
	for id, c := range won {
		got, err := s.GetRequest(ctx, id)
		must(t, err)
		if got.State != c.r.State || got.Decision != c.r.Decision || !slices.Equal(got.Reasons, c.r.Reasons) ||
			got.LockKey != c.r.LockKey || got.Isolated != c.r.Isolated || got.Digest != c.r.Digest || !slices.Equal(got.Packages, pkgs) {
			t.Errorf("%s: stored %+v, want the classification that won, %+v", id, got, c.r)
		}
		if c.b != nil {
			wantBindings = append(wantBindings, id)
		}
	}
	for i := range 8 {
		if got, _ := s.GetRequest(ctx, fmt.Sprintf("done%d", i)); got.State != broker.StatePending || got.Decision != "" {
			t.Errorf("done%d after a refused classification: %+v", i, got)
		}
	}
	bs, err := s.Bindings(ctx, "s1")
	must(t, err)
	var gotBindings []string
	for _, b := range bs {
		gotBindings = append(gotBindings, b.RequestID)
	}
	slices.Sort(gotBindings)
	slices.Sort(wantBindings)
	same(t, "bindings: the requests bound", gotBindings, wantBindings)
	l, err := s.AuditLog(ctx, "s1")
	must(t, err)
	if len(l) != n {
		t.Errorf("audit: %d events, want %d (one per classification that won)", len(l), n)
	}
	after2 := take(t, s, "s2")
	after2.AllAudit = before2.AllAudit // s1's events count there
	same(t, "session s2 after refused classifications", after2, before2)
}
