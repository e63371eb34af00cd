package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// testBindApproved: BindApproved binds exactly the approved requests a published layer
// serves (lock key, isolation, no upload, a session on the base and interpreter), oldest
// first and at most limit, each with its binding and audit event, and leaves every other
// request, the claimed one included, as it was.
func testBindApproved(t *testing.T, s broker.Store) {
	ctx := context.Background()
	on := func(id, base, interp string, i int) broker.Session {
		se := session(id, "alice", i)
		se.Base, se.Interpreter = base, interp
		return se
	}
	must(t, s.CreateSession(ctx, on("s1", "sha256:b1", "sha256:p1", 1)))
	must(t, s.CreateSession(ctx, on("s2", "sha256:b1", "sha256:p1", 2)))
	must(t, s.CreateSession(ctx, on("s3", "sha256:b2", "sha256:p1", 3))) // another base
	must(t, s.CreateSession(ctx, on("s4", "sha256:b1", "sha256:p2", 4))) // another interpreter
	add := func(id, session string, i int, edit func(*broker.Request)) {
		t.Helper()
		r := request(id, session, broker.StateApproved, i)
		r.LockKey, r.Decision = "key-1", "auto-approved"
		if edit != nil {
			edit(&r)
		}
		must(t, s.CreateRequest(ctx, r))
	}
	add("r1", "s1", 1, nil)
	add("r2", "s2", 2, nil)
	add("r3", "s1", 3, nil)
	add("claimed", "s1", 0, nil) // the oldest: ClaimBuild takes it below
	add("other-key", "s1", 4, func(r *broker.Request) { r.LockKey = "key-2" })
	add("upload", "s1", 5, func(r *broker.Request) { r.Upload = "foo-1.0-py3-none-any.whl" })
	add("iso", "s1", 6, func(r *broker.Request) { r.Decision = broker.DecisionApprovedIsolated })
	add("pending", "s1", 7, func(r *broker.Request) { r.State = broker.StatePending })
	add("other-base", "s3", 8, nil)
	add("other-interp", "s4", 9, nil)
	claimed, ok, err := s.ClaimBuild(ctx, broker.Lease{Holder: "w1", TTL: time.Minute})
	must(t, err)
	if !ok || claimed.ID != "claimed" {
		t.Fatalf("ClaimBuild: %q %v, want the oldest, claimed", claimed.ID, ok)
	}
	before := map[string]snapshot{}
	for _, id := range []string{"s1", "s2", "s3", "s4"} {
		before[id] = take(t, s, id)
	}

	p := broker.PublishedLayer{Base: "sha256:b1", Interpreter: "sha256:p1", LockKey: "key-1", Kind: broker.KindExt,
		Digest: "sha256:0d", Ref: "r@sha256:0d"}
	audit := func(r broker.Request) broker.AuditEvent {
		e := event("bound", r.SessionID, r.ID)
		e.Detail = "bound " + r.ID
		return e
	}
	for _, bad := range []broker.PublishedLayer{{}, {Kind: broker.KindExt, Digest: "sha256:0d"}, {Kind: "tar", Digest: "sha256:0d", LockKey: "key-1"}} {
		_, err := s.BindApproved(ctx, bad, 10, audit)
		wantErr(t, fmt.Sprintf("BindApproved(%+v)", bad), err, broker.ErrInvalid)
	}
	got, err := s.BindApproved(ctx, p, 1, audit)
	must(t, err)
	if len(got) != 1 || got[0].ID != "r1" || got[0].State != broker.StateBound || got[0].Digest != p.Digest {
		t.Fatalf("BindApproved(limit 1) = %+v, want r1 bound to %s", got, p.Digest)
	}
	got, err = s.BindApproved(ctx, p, 10, audit)
	must(t, err)
	var ids []string
	for _, r := range got {
		ids = append(ids, r.ID)
	}
	same(t, "BindApproved(limit 10)", ids, []string{"r2", "r3"})
	if got, err = s.BindApproved(ctx, p, 10, audit); err != nil || len(got) != 0 {
		t.Errorf("BindApproved with nothing left = %v, %v; want none", got, err)
	}

	for id, want := range map[string]broker.State{"r1": broker.StateBound, "r2": broker.StateBound, "r3": broker.StateBound,
		"claimed": broker.StateBuilding, "other-key": broker.StateApproved, "upload": broker.StateApproved, "iso": broker.StateApproved,
		"pending": broker.StatePending, "other-base": broker.StateApproved, "other-interp": broker.StateApproved} {
		r, err := s.GetRequest(ctx, id)
		must(t, err)
		if r.State != want {
			t.Errorf("%s: %s, want %s", id, r.State, want)
		}
		if want == broker.StateBound && (r.Digest != p.Digest || r.LockKey != "key-1" || !r.Updated.After(T0.Add(time.Minute))) {
			t.Errorf("%s bound: digest %s, key %s, updated %s", id, r.Digest, r.LockKey, r.Updated)
		}
	}
	for _, sid := range []string{"s1", "s2"} {
		after := take(t, s, sid)
		if after.Session.Version <= before[sid].Session.Version {
			t.Errorf("%s: version %d -> %d, want it moved", sid, before[sid].Session.Version, after.Session.Version)
		}
		want := map[string]bool{"s1": true, "s2": true}
		var boundIDs []string
		for _, b := range after.Bindings {
			if b.Kind != broker.KindExt || b.Digest != p.Digest || b.Ref != p.Ref || b.SessionID != sid || !want[sid] {
				t.Errorf("%s: binding %+v", sid, b)
			}
			boundIDs = append(boundIDs, b.RequestID)
		}
		var audited []string
		for _, e := range after.Audit[len(before[sid].Audit):] {
			if e.Action != "bound" || e.Detail != "bound "+e.RequestID {
				t.Errorf("%s: audit event %+v", sid, e)
			}
			audited = append(audited, e.RequestID)
		}
		wantIDs := map[string][]string{"s1": {"r1", "r3"}, "s2": {"r2"}}[sid]
		same(t, sid+": bindings' requests", boundIDs, wantIDs)
		same(t, sid+": audited requests", audited, wantIDs)
	}
	for _, sid := range []string{"s3", "s4"} { // AllAudit counts every session's events
		after := take(t, s, sid)
		after.AllAudit = before[sid].AllAudit
		same(t, sid+" after", after, before[sid])
	}
}

// testCreateRequestConcurrent: requests created at once (a group commit's batch, where the
// store has one) are each stored with their audit event, or refused alone: an ID that
// exists with ErrConflict, a session that does not with ErrNotFound, and nothing of the
// refused ones is kept.
func testCreateRequestConcurrent(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	must(t, s.CreateRequest(ctx, request("taken", "s1", broker.StatePending, 0), event("request.create", "s1", "taken")))
	const n = 60
	errs := make([]error, n)
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		ids[i] = fmt.Sprintf("r%02d", i)
		sid := "s1"
		switch i {
		case 17:
			ids[i] = "taken"
		case 41:
			sid = "nope"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.CreateRequest(ctx, request(ids[i], sid, broker.StateApproved, i+1), event("request.create", sid, ids[i]))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		switch i {
		case 17:
			wantErr(t, "a taken ID", err, broker.ErrConflict)
		case 41:
			wantErr(t, "a missing session", err, broker.ErrNotFound)
		default:
			must(t, err)
		}
	}
	reqs, err := s.ListRequests(ctx, broker.RequestFilter{SessionID: "s1"})
	must(t, err)
	l, err := s.AuditLog(ctx, "")
	must(t, err)
	audited := map[string]int{}
	for _, e := range l {
		audited[e.RequestID]++
	}
	if len(reqs) != n-1 || len(l) != n-1 {
		t.Errorf("%d requests and %d audit events, want %d of each", len(reqs), len(l), n-1)
	}
	for _, r := range reqs {
		if audited[r.ID] != 1 {
			t.Errorf("%s: %d audit events, want 1", r.ID, audited[r.ID])
		}
		if r.ID == "taken" && r.State != broker.StatePending {
			t.Errorf("the taken request was overwritten: %+v", r)
		}
	}
	if audited["r41"] != 0 {
		t.Errorf("the request of a missing session was audited")
	}
}
