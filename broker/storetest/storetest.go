package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// SQLStore is implemented by stores backed by database/sql; the suite then also checks
// that the audit table refuses UPDATE and DELETE at the database level.
type SQLStore interface {
	DB() *sql.DB
}

// T0 is the base time of the suite's fixtures: nanoseconds set, UTC.
var T0 = time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)

// Run runs the suite; newStore must return a new, empty store each call.
func Run(t *testing.T, newStore func() broker.Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, broker.Store)
	}{
		{"Sessions", testSessions},
		{"Tokens", testTokens},
		{"CreateSessionToken", testCreateSessionToken},
		{"Requests", testRequests},
		{"UpdateRequest", testUpdateRequest},
		{"UpdateRequestConcurrent", testUpdateRequestConcurrent},
		{"ListRequests", testListRequests},
		{"SessionsPaging", testSessionsPaging},
		{"RequestsPaging", testRequestsPaging},
		{"AuditPaging", testAuditPaging},
		{"PruneAudit", testPruneAudit},
		{"ClaimBuild", testClaimBuild},
		{"ClaimBuildConcurrent", testClaimBuildConcurrent},
		{"ClaimLeavesCrowd", testClaimLeavesCrowd},
		{"LeaseExpiry", testLeaseExpiry},
		{"LeaseRenew", testLeaseRenew},
		{"LeaseFinish", testLeaseFinish},
		{"NamedLeases", testNamedLeases},
		{"NamedLeasesConcurrent", testNamedLeasesConcurrent},
		{"Bindings", testBindings},
		{"SessionVersion", testSessionVersion},
		{"Audit", testAudit},
		{"AuditAppendOnly", testAuditAppendOnly},
		{"CreateAudited", testCreateAudited},
		{"Transition", testTransition},
		{"Bind", testBind},
		{"CreateBound", testCreateBound},
		{"Classified", testClassified},
		{"ClassifiedConcurrent", testClassifiedConcurrent},
		{"BindApproved", testBindApproved},
		{"CreateRequestConcurrent", testCreateRequestConcurrent},
		{"ApplyRebase", testApplyRebase},
		{"PointReadsConcurrent", testPointReadsConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore()
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

func same(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func session(id, owner string, i int) broker.Session {
	return broker.Session{ID: id, Owner: owner, Created: T0.Add(time.Duration(i) * time.Second)}
}

func request(id, sessionID string, state broker.State, i int) broker.Request {
	return broker.Request{
		ID: id, SessionID: sessionID, Specs: []string{"foo==1.0", "bar>=2"}, State: state,
		Created: T0.Add(time.Duration(i) * time.Second), Updated: T0.Add(time.Duration(i) * time.Second),
	}
}

func testSessions(t *testing.T, s broker.Store) {
	ctx := context.Background()
	a := broker.Session{ID: "s1", Owner: "alice", Created: T0, Interpreter: "sha256:aa", Base: "sha256:bb", BaseLock: []byte(`{"x":1}`)}
	must(t, s.CreateSession(ctx, a))
	must(t, s.CreateSession(ctx, session("s2", "bob", 2)))
	must(t, s.CreateSession(ctx, session("s3", "alice", 3)))
	got, err := s.GetSession(ctx, "s1")
	must(t, err)
	same(t, "GetSession", got, a)

	wantErr(t, "duplicate", s.CreateSession(ctx, session("s1", "bob", 9)), broker.ErrConflict)
	got, _ = s.GetSession(ctx, "s1")
	same(t, "after refused duplicate", got, a)
	_, err = s.GetSession(ctx, "nope")
	wantErr(t, "GetSession missing", err, broker.ErrNotFound)
	wantErr(t, "empty id", s.CreateSession(ctx, broker.Session{Owner: "x"}), broker.ErrInvalid)
	wantErr(t, "empty owner", s.CreateSession(ctx, broker.Session{ID: "x"}), broker.ErrInvalid)

	for _, tc := range []struct {
		owner string
		want  []string
	}{{"", []string{"s1", "s2", "s3"}}, {"alice", []string{"s1", "s3"}}, {"bob", []string{"s2"}}, {"carol", nil}} {
		l, err := s.ListSessions(ctx, tc.owner)
		must(t, err)
		var ids []string
		for _, x := range l {
			ids = append(ids, x.ID)
		}
		same(t, "ListSessions("+tc.owner+")", ids, tc.want)
	}

	must(t, s.SetSessionBase(ctx, "s2", "sha256:11", "sha256:22", []byte("lock")))
	got, _ = s.GetSession(ctx, "s2")
	want := session("s2", "bob", 2)
	want.Interpreter, want.Base, want.BaseLock = "sha256:11", "sha256:22", []byte("lock")
	if got.Version <= 0 {
		t.Errorf("after SetSessionBase: version %d, want it moved from 0", got.Version)
	}
	want.Version = got.Version
	same(t, "after SetSessionBase", got, want)
	wantErr(t, "SetSessionBase missing", s.SetSessionBase(ctx, "nope", "", "", nil), broker.ErrNotFound)
}

func testTokens(t *testing.T, s broker.Store) {
	ctx := context.Background()
	tok := broker.Token{Hash: "ab12", Role: broker.RoleOwner, Subject: "alice", Created: T0}
	must(t, s.PutToken(ctx, tok))
	got, err := s.GetToken(ctx, "ab12")
	must(t, err)
	same(t, "GetToken", got, tok)
	wantErr(t, "duplicate", s.PutToken(ctx, broker.Token{Hash: "ab12", Role: broker.RoleAdmin, Subject: "mallory"}), broker.ErrConflict)
	got, _ = s.GetToken(ctx, "ab12")
	same(t, "after refused duplicate", got, tok)
	_, err = s.GetToken(ctx, "AB12")
	wantErr(t, "GetToken other case", err, broker.ErrNotFound)
	for _, bad := range []broker.Token{
		{Hash: "c", Role: "root", Subject: "x"},
		{Hash: "", Role: broker.RoleAdmin, Subject: "x"},
		{Hash: "d", Role: broker.RoleAdmin, Subject: ""},
	} {
		wantErr(t, fmt.Sprintf("PutToken(%+v)", bad), s.PutToken(ctx, bad), broker.ErrInvalid)
	}
}

// testCreateSessionToken: a session and its agent token are stored together, with the
// audit event, or not at all.
func testCreateSessionToken(t *testing.T, s broker.Store) {
	ctx := context.Background()
	se := session("s1", "alice", 0)
	tok := broker.Token{Hash: "h1", Role: broker.RoleAgent, Subject: "s1", Created: T0}
	must(t, s.CreateSessionToken(ctx, se, tok, event("session.create", "s1", "")))
	got, err := s.GetToken(ctx, "h1")
	must(t, err)
	same(t, "GetToken", got, tok)
	gotSe, err := s.GetSession(ctx, "s1")
	must(t, err)
	same(t, "GetSession owner", gotSe.Owner, "alice")
	if l, _ := s.AuditLog(ctx, "s1"); len(l) != 1 || l[0].Action != "session.create" {
		t.Errorf("audit: %+v, want one session.create", l)
	}

	// The token's hash exists: the session is not created either.
	wantErr(t, "token hash taken", s.CreateSessionToken(ctx, session("s2", "bob", 1),
		broker.Token{Hash: "h1", Role: broker.RoleAgent, Subject: "s2", Created: T0}, event("session.create", "s2", "")), broker.ErrConflict)
	_, err = s.GetSession(ctx, "s2")
	wantErr(t, "session of a refused token", err, broker.ErrNotFound)
	if l, _ := s.AuditLog(ctx, "s2"); len(l) != 0 {
		t.Errorf("audit of a refused session: %+v", l)
	}
	// The session exists: its new token is not stored.
	wantErr(t, "session taken", s.CreateSessionToken(ctx, session("s1", "bob", 1),
		broker.Token{Hash: "h2", Role: broker.RoleAgent, Subject: "s1", Created: T0}), broker.ErrConflict)
	_, err = s.GetToken(ctx, "h2")
	wantErr(t, "token of a refused session", err, broker.ErrNotFound)
	// Only the session's own agent token.
	for _, bad := range []broker.Token{
		{Hash: "h3", Role: broker.RoleOwner, Subject: "s3"},
		{Hash: "h3", Role: broker.RoleAgent, Subject: "s1"},
		{Hash: "", Role: broker.RoleAgent, Subject: "s3"},
	} {
		wantErr(t, fmt.Sprintf("token %+v", bad), s.CreateSessionToken(ctx, session("s3", "carol", 2), bad), broker.ErrInvalid)
	}
	_, err = s.GetSession(ctx, "s3")
	wantErr(t, "session of an invalid token", err, broker.ErrNotFound)
}

func testRequests(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	r := broker.Request{
		ID: "r1", SessionID: "s1", Specs: []string{"numpy<2"}, Upload: "x-1-py3-none-any.whl",
		State: broker.StatePending, Decision: "pending", Reasons: []string{"overrides the base pin numpy==2.1"},
		Isolated: true, Packages: []broker.Pkg{{Name: "numpy", Version: "1.26.4", Filename: "numpy.whl", SHA256: "ff", Size: 42}},
		LockKey: "k", Digest: "sha256:dd", Error: "e", Approver: "bob", Created: T0, Updated: T0.Add(time.Nanosecond),
	}
	must(t, s.CreateRequest(ctx, r))
	got, err := s.GetRequest(ctx, "r1")
	must(t, err)
	same(t, "GetRequest", got, r)

	wantErr(t, "duplicate", s.CreateRequest(ctx, request("r1", "s1", broker.StateApproved, 1)), broker.ErrConflict)
	got, _ = s.GetRequest(ctx, "r1")
	same(t, "after refused duplicate", got, r)
	wantErr(t, "no session", s.CreateRequest(ctx, request("r2", "nope", broker.StateApproved, 1)), broker.ErrNotFound)
	wantErr(t, "bad state", s.CreateRequest(ctx, request("r3", "s1", "exploded", 1)), broker.ErrInvalid)
	wantErr(t, "no id", s.CreateRequest(ctx, request("", "s1", broker.StatePending, 1)), broker.ErrInvalid)
	_, err = s.GetRequest(ctx, "r2")
	wantErr(t, "GetRequest after refused create", err, broker.ErrNotFound)
}

func testUpdateRequest(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	orig := request("r1", "s1", broker.StatePending, 0)
	must(t, s.CreateRequest(ctx, orig))

	must(t, s.UpdateRequest(ctx, "r1", func(r *broker.Request) error {
		r.State, r.Approver, r.Isolated = broker.StateApproved, "bob", true
		r.Reasons = append(r.Reasons, "approved by bob")
		r.Updated = T0.Add(time.Hour)
		return nil
	}))
	want := orig
	want.State, want.Approver, want.Isolated, want.Reasons, want.Updated = broker.StateApproved, "bob", true, []string{"approved by bob"}, T0.Add(time.Hour)
	got, _ := s.GetRequest(ctx, "r1")
	same(t, "after update", got, want)

	boom := errors.New("boom")
	err := s.UpdateRequest(ctx, "r1", func(r *broker.Request) error { r.State = broker.StateDenied; return boom })
	wantErr(t, "fn error", err, boom)
	for _, tc := range []struct {
		name string
		fn   func(*broker.Request)
	}{
		{"change ID", func(r *broker.Request) { r.ID = "r9" }},
		{"change SessionID", func(r *broker.Request) { r.SessionID = "s9" }},
		{"change Created", func(r *broker.Request) { r.Created = T0.Add(time.Minute) }},
		{"bad state", func(r *broker.Request) { r.State = "" }},
	} {
		err := s.UpdateRequest(ctx, "r1", func(r *broker.Request) error { tc.fn(r); return nil })
		wantErr(t, tc.name, err, broker.ErrInvalid)
	}
	got, _ = s.GetRequest(ctx, "r1")
	same(t, "after refused updates", got, want)
	wantErr(t, "missing", s.UpdateRequest(ctx, "nope", func(*broker.Request) error { return nil }), broker.ErrNotFound)
}

// testUpdateRequestConcurrent checks that concurrent read-modify-write updates lose nothing.
func testUpdateRequestConcurrent(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	must(t, s.CreateRequest(ctx, request("r1", "s1", broker.StatePending, 0)))
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := s.UpdateRequest(ctx, "r1", func(r *broker.Request) error {
				r.Reasons = append(r.Reasons, fmt.Sprint(i))
				return nil
			}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got, _ := s.GetRequest(ctx, "r1")
	if len(got.Reasons) != n {
		t.Errorf("after %d concurrent updates: %d reasons %v (lost updates)", n, len(got.Reasons), got.Reasons)
	}
}

func testListRequests(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("a1", "alice", 0)))
	must(t, s.CreateSession(ctx, session("b1", "bob", 1)))
	must(t, s.CreateRequest(ctx, request("r3", "a1", broker.StatePending, 3)))
	must(t, s.CreateRequest(ctx, request("r1", "a1", broker.StateApproved, 1)))
	must(t, s.CreateRequest(ctx, request("r2", "b1", broker.StatePending, 2)))
	for _, tc := range []struct {
		f    broker.RequestFilter
		want []string
	}{
		{broker.RequestFilter{}, []string{"r1", "r2", "r3"}},
		{broker.RequestFilter{State: broker.StatePending}, []string{"r2", "r3"}},
		{broker.RequestFilter{SessionID: "a1"}, []string{"r1", "r3"}},
		{broker.RequestFilter{Owner: "bob"}, []string{"r2"}},
		{broker.RequestFilter{Owner: "alice", State: broker.StatePending}, []string{"r3"}},
		{broker.RequestFilter{Owner: "bob", SessionID: "a1"}, nil},
		{broker.RequestFilter{State: broker.StateBound}, nil},
	} {
		l, err := s.ListRequests(ctx, tc.f)
		must(t, err)
		var ids []string
		for _, r := range l {
			ids = append(ids, r.ID)
		}
		same(t, fmt.Sprintf("ListRequests(%+v)", tc.f), ids, tc.want)
	}
}

func testClaimBuild(t *testing.T, s broker.Store) {
	ctx := context.Background()
	if _, ok, err := s.ClaimBuild(ctx, lease("w1", 0)); err != nil || ok {
		t.Fatalf("empty store: ok=%v err=%v", ok, err)
	}
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	must(t, s.CreateRequest(ctx, request("late", "s1", broker.StateApproved, 5)))
	must(t, s.CreateRequest(ctx, request("pend", "s1", broker.StatePending, 0)))
	must(t, s.CreateRequest(ctx, request("early", "s1", broker.StateApproved, 1)))
	for _, want := range []string{"early", "late"} {
		r, ok, err := s.ClaimBuild(ctx, lease("w1", 0))
		must(t, err)
		if !ok || r.ID != want || r.State != broker.StateBuilding {
			t.Fatalf("ClaimBuild = %s %s %v, want %s building", r.ID, r.State, ok, want)
		}
		stored, _ := s.GetRequest(ctx, want)
		if stored.State != broker.StateBuilding {
			t.Errorf("stored state of %s = %s, want building", want, stored.State)
		}
		same(t, "claimed specs", r.Specs, []string{"foo==1.0", "bar>=2"})
	}
	if r, ok, err := s.ClaimBuild(ctx, lease("w2", 0)); err != nil || ok {
		t.Fatalf("drained (the claims' leases live): got %s ok=%v err=%v", r.ID, ok, err)
	}
	if l, _ := s.AuditLog(ctx, "s1"); len(l) != 0 {
		t.Errorf("claims of approved requests audited %+v; only takeovers of expired leases are", l)
	}
	if _, _, err := s.ClaimBuild(ctx, broker.Lease{Holder: "w1"}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("a lease without a TTL: err = %v, want ErrInvalid", err)
	}
}

// testClaimBuildConcurrent: many claimers, every approved request claimed exactly once.
func testClaimBuildConcurrent(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	const n, workers = 60, 8
	for i := range n {
		must(t, s.CreateRequest(ctx, request(fmt.Sprintf("r%03d", i), "s1", broker.StateApproved, i)))
	}
	var mu sync.Mutex
	var claimed []string
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for {
				r, ok, err := s.ClaimBuild(ctx, lease(fmt.Sprintf("w%d", i), 0))
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					return
				}
				mu.Lock()
				claimed = append(claimed, r.ID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sort.Strings(claimed)
	if len(claimed) != n {
		t.Fatalf("claimed %d requests, want %d", len(claimed), n)
	}
	for i, id := range claimed {
		if want := fmt.Sprintf("r%03d", i); id != want {
			t.Fatalf("claims %v: %s claimed twice or %s never", claimed, id, want)
		}
	}
}

func testBindings(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	must(t, s.CreateSession(ctx, session("s2", "bob", 0)))
	b1 := broker.Binding{SessionID: "s1", Kind: broker.KindExt, Digest: "sha256:01", Ref: "r:ext-1", RequestID: "r1", Created: T0}
	b2 := broker.Binding{SessionID: "s1", Kind: broker.KindExt, Digest: "sha256:02", Ref: "r:ext-2", Created: T0}
	must(t, s.AddBinding(ctx, b1))
	must(t, s.AddBinding(ctx, b2))
	must(t, s.AddBinding(ctx, broker.Binding{SessionID: "s2", Kind: broker.KindIso, Digest: "sha256:03", Created: T0}))
	got, err := s.Bindings(ctx, "s1")
	must(t, err)
	same(t, "Bindings in insertion order", got, []broker.Binding{b1, b2})

	wantErr(t, "no session", s.AddBinding(ctx, broker.Binding{SessionID: "nope", Kind: broker.KindExt, Digest: "d"}), broker.ErrNotFound)
	wantErr(t, "bad kind", s.AddBinding(ctx, broker.Binding{SessionID: "s1", Kind: "base", Digest: "d"}), broker.ErrInvalid)
	wantErr(t, "no digest", s.AddBinding(ctx, broker.Binding{SessionID: "s1", Kind: broker.KindExt}), broker.ErrInvalid)

	iso := broker.Binding{SessionID: "s1", Kind: broker.KindIso, Digest: "sha256:09", Ref: "r:iso", RequestID: "r7", Created: T0.Add(time.Hour)}
	// A bad entry refuses the whole replacement.
	err = s.ReplaceBindings(ctx, "s1", []broker.Binding{iso, {SessionID: "s2", Kind: broker.KindExt, Digest: "x"}})
	wantErr(t, "replace with another session's binding", err, broker.ErrInvalid)
	got, _ = s.Bindings(ctx, "s1")
	same(t, "after refused replace", got, []broker.Binding{b1, b2})

	must(t, s.ReplaceBindings(ctx, "s1", []broker.Binding{iso}))
	got, _ = s.Bindings(ctx, "s1")
	same(t, "after replace", got, []broker.Binding{iso})
	got, _ = s.Bindings(ctx, "s2")
	if len(got) != 1 {
		t.Errorf("replace touched another session: %+v", got)
	}
	must(t, s.ReplaceBindings(ctx, "s1", nil))
	got, _ = s.Bindings(ctx, "s1")
	same(t, "after replace with none", got, []broker.Binding(nil))
	wantErr(t, "replace no session", s.ReplaceBindings(ctx, "nope", nil), broker.ErrNotFound)
}

func testAudit(t *testing.T, s broker.Store) {
	ctx := context.Background()
	e1 := broker.AuditEvent{Time: T0, Actor: "bob", Action: "approve", SessionID: "s1", RequestID: "r1",
		Packages: []broker.Pkg{{Name: "foo", Version: "1", Filename: "foo-1-py3-none-any.whl", SHA256: "ab", Size: 3}},
		Decision: "approved", Detail: "isolated=false"}
	e2 := broker.AuditEvent{Time: T0.Add(time.Second), Actor: "admin", Action: "gc"}
	e3 := broker.AuditEvent{Time: T0.Add(2 * time.Second), Actor: "s1", Action: "request", SessionID: "s1"}
	for _, e := range []broker.AuditEvent{e1, e2, e3} {
		must(t, s.Audit(ctx, e))
	}
	wantErr(t, "no actor", s.Audit(ctx, broker.AuditEvent{Action: "x"}), broker.ErrInvalid)
	wantErr(t, "no action", s.Audit(ctx, broker.AuditEvent{Actor: "x"}), broker.ErrInvalid)

	all, err := s.AuditLog(ctx, "")
	must(t, err)
	if len(all) != 3 {
		t.Fatalf("AuditLog: %d events, want 3", len(all))
	}
	for i, want := range []broker.AuditEvent{e1, e2, e3} {
		if i > 0 && all[i].ID <= all[i-1].ID {
			t.Errorf("IDs not increasing: %d after %d", all[i].ID, all[i-1].ID)
		}
		want.ID = all[i].ID
		same(t, fmt.Sprintf("event %d", i), all[i], want)
	}
	s1, err := s.AuditLog(ctx, "s1")
	must(t, err)
	if len(s1) != 2 || s1[0].Action != "approve" || s1[1].Action != "request" {
		t.Errorf("AuditLog(s1) = %+v", s1)
	}
}

func testAuditAppendOnly(t *testing.T, s broker.Store) {
	ctx := context.Background()
	if _, ok := any(s).(interface {
		UpdateAudit(context.Context, broker.AuditEvent) error
	}); ok {
		t.Error("the store has an UpdateAudit method: the audit log must be append-only")
	}
	sq, ok := s.(SQLStore)
	if !ok {
		t.Log("not a database/sql store: the database-level append-only check does not apply")
		return
	}
	must(t, s.Audit(ctx, broker.AuditEvent{Time: T0, Actor: "bob", Action: "approve", Decision: "approved"}))
	for _, q := range []string{
		`UPDATE audit SET decision = 'denied'`,
		`UPDATE audit SET actor = 'mallory' WHERE id = (SELECT MIN(id) FROM audit)`,
		`DELETE FROM audit`,
	} {
		if _, err := sq.DB().ExecContext(ctx, q); err == nil {
			t.Errorf("%s: succeeded; the audit table must refuse it", q)
		}
	}
	l, err := s.AuditLog(ctx, "")
	must(t, err)
	if len(l) != 1 || l[0].Decision != "approved" || l[0].Actor != "bob" {
		t.Errorf("audit log changed: %+v", l)
	}
}

// testSessionVersion: a session's version moves with every change GET env shows (its base,
// its bindings, its requests' state), in the change's own transaction, and with nothing
// else: another session's changes and lease renewals leave it as it is.
func testSessionVersion(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 1)))
	must(t, s.CreateSession(ctx, session("s2", "alice", 2)))
	version := func(id string) int64 {
		t.Helper()
		se, err := s.GetSession(ctx, id)
		must(t, err)
		return se.Version
	}
	last := version("s1")
	if _, ok := s.(broker.VersionedSessions); ok && last != 0 {
		// The server shows a session at version 0 without reading its bindings and requests.
		t.Errorf("a new session: version %d, want 0 (the store is broker.VersionedSessions)", last)
	}
	moved := func(what string, want bool) {
		t.Helper()
		v := version("s1")
		if (v != last) != want {
			t.Errorf("%s: version %d -> %d, want moved=%v", what, last, v, want)
		}
		last = v
	}
	must(t, s.CreateRequest(ctx, request("r1", "s1", broker.StateApproved, 1)))
	moved("CreateRequest", true)
	must(t, s.CreateRequest(ctx, request("r2", "s2", broker.StateApproved, 2)))
	moved("another session's request", false)
	must(t, s.UpdateRequest(ctx, "r1", func(r *broker.Request) error { r.State = broker.StatePending; return nil }))
	moved("UpdateRequest", true)
	must(t, s.UpdateRequest(ctx, "r1", func(r *broker.Request) error { r.State = broker.StateApproved; return nil }))
	l := broker.Lease{Holder: "w1", TTL: time.Minute}
	claimed, ok, err := s.ClaimBuild(ctx, l)
	must(t, err)
	if !ok || claimed.ID != "r1" {
		t.Fatalf("ClaimBuild: %s %v, want r1", claimed.ID, ok)
	}
	moved("ClaimBuild (approved -> building)", true)
	must(t, s.RenewBuild(ctx, "r1", l))
	moved("RenewBuild", false)
	wantErr(t, "refused update", s.UpdateRequest(ctx, "r1", func(*broker.Request) error { return broker.ErrConflict }), broker.ErrConflict)
	moved("a refused update", false)
	must(t, s.AddBinding(ctx, broker.Binding{SessionID: "s1", Kind: broker.KindExt, Digest: "sha256:01", Created: T0}))
	moved("AddBinding", true)
	must(t, s.ReplaceBindings(ctx, "s1", nil))
	moved("ReplaceBindings", true)
	must(t, s.SetSessionBase(ctx, "s1", "sha256:11", "sha256:22", []byte("lock")))
	moved("SetSessionBase", true)
}

// testPointReadsConcurrent reads sessions, requests and tokens by key from many
// goroutines at once, as a burst of agents does: every read gets its own row, or
// ErrNotFound for a key that does not exist (among them keys a database may refuse in a
// query: invalid UTF-8, NUL), whatever reads it shared the store with; and a row read after
// its write returns always sees it.
func testPointReadsConcurrent(t *testing.T, s broker.Store) {
	ctx := context.Background()
	const n = 40
	for i := range n {
		se := session(fmt.Sprintf("s%02d", i), "alice", i)
		se.BaseLock = []byte(fmt.Sprintf(`{"n":%d}`, i))
		must(t, s.CreateSession(ctx, se))
		must(t, s.CreateRequest(ctx, request(fmt.Sprintf("r%02d", i), se.ID, broker.StatePending, i)))
		must(t, s.PutToken(ctx, broker.Token{Hash: fmt.Sprintf("h%02d", i), Role: broker.RoleAgent, Subject: se.ID, Created: T0}))
	}
	missing := []string{"nope", "s\x00", "\xff\xfe", "S01", ""}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	fail := func(format string, args ...any) {
		select {
		case errs <- fmt.Errorf(format, args...):
		default:
		}
	}
	for g := range 8 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := g % n
			switch g % 4 {
			case 0:
				se, err := s.GetSession(ctx, fmt.Sprintf("s%02d", i))
				if err != nil || se.Owner != "alice" || string(se.BaseLock) != fmt.Sprintf(`{"n":%d}`, i) {
					fail("GetSession(s%02d) = %+v, %v", i, se, err)
				}
			case 1:
				r, err := s.GetRequest(ctx, fmt.Sprintf("r%02d", i))
				if err != nil || r.SessionID != fmt.Sprintf("s%02d", i) || !reflect.DeepEqual(r.Specs, []string{"foo==1.0", "bar>=2"}) {
					fail("GetRequest(r%02d) = %+v, %v", i, r, err)
				}
			case 2:
				tok, err := s.GetToken(ctx, fmt.Sprintf("h%02d", i))
				if err != nil || tok.Subject != fmt.Sprintf("s%02d", i) || tok.Hash != fmt.Sprintf("h%02d", i) {
					fail("GetToken(h%02d) = %+v, %v", i, tok, err)
				}
			case 3:
				k := missing[g/4%len(missing)]
				_, err1 := s.GetSession(ctx, k)
				_, err2 := s.GetRequest(ctx, k)
				_, err3 := s.GetToken(ctx, k)
				for _, err := range []error{err1, err2, err3} {
					if !errors.Is(err, broker.ErrNotFound) {
						fail("reading missing key %q: err = %v, want ErrNotFound", k, err)
					}
				}
				id := fmt.Sprintf("new%03d", g)
				if err := s.CreateRequest(ctx, request(id, fmt.Sprintf("s%02d", i), broker.StateApproved, g)); err != nil {
					fail("CreateRequest(%s): %v", id, err)
					return
				}
				if r, err := s.GetRequest(ctx, id); err != nil || r.State != broker.StateApproved {
					fail("GetRequest(%s) after its create = %+v, %v", id, r, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
