package broker_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// TestEnvFollowsTheStore: GET env serves what it read before only while the session's
// version is the same; a change written to the store by anyone (here straight into the
// store, as another replica would) shows on the next call.
func TestEnvFollowsTheStore(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	get := func() broker.Env {
		t.Helper()
		var env broker.Env
		e.mustDo("GET", "/v1/sessions/"+e.sesA+"/env", e.agentA, "", "", http.StatusOK, &env)
		return env
	}
	if env := get(); len(env.Requests) != 0 || len(env.Bindings) != 0 {
		t.Fatalf("a new session's env: %+v", env)
	}
	r := e.request(e.agentA, e.sesA, `"foo==1.0"`)
	if env := get(); len(env.Requests) != 1 || env.Requests[0].ID != r.ID {
		t.Fatalf("after a request: open %+v, want %s", env.Requests, r.ID)
	}
	get() // from memory now

	now := time.Now().UTC()
	other := broker.Request{ID: "req_other", SessionID: e.sesA, Specs: []string{"bar"}, State: broker.StatePending, Created: now, Updated: now}
	if err := e.store.CreateRequest(ctx, other); err != nil {
		t.Fatal(err)
	}
	if env := get(); len(env.Requests) != 2 {
		t.Fatalf("after another replica's request: %d open, want 2", len(env.Requests))
	}
	if err := e.store.UpdateRequest(ctx, "req_other", func(q *broker.Request) error { q.State = broker.StateDenied; return nil }); err != nil {
		t.Fatal(err)
	}
	if env := get(); len(env.Requests) != 1 {
		t.Fatalf("after another replica denied one: %d open, want 1", len(env.Requests))
	}
	b := broker.Binding{SessionID: e.sesA, Kind: broker.KindExt, Digest: "sha256:01", Ref: "r@sha256:01", Created: now}
	if err := e.store.AddBinding(ctx, b); err != nil {
		t.Fatal(err)
	}
	if env := get(); len(env.Bindings) != 1 || env.Bindings[0].Digest != b.Digest {
		t.Fatalf("after another replica bound a layer: %+v", env.Bindings)
	}
}

// binder binds "ready" at once, as a builder that has its layer published would.
type binder struct{ fakeBuilder }

func (b *binder) BindNow(s broker.Session, r broker.Request) (broker.Binding, broker.AuditEvent, bool) {
	if r.Specs[0] != "ready==1.0" {
		return broker.Binding{}, broker.AuditEvent{}, false
	}
	return broker.Binding{SessionID: s.ID, Kind: broker.KindExt, Digest: "sha256:0b", Ref: "r@sha256:0b", RequestID: r.ID, Created: time.Now().UTC()},
		broker.AuditEvent{Time: time.Now().UTC(), Actor: "builder", Action: "bound", SessionID: s.ID, RequestID: r.ID}, true
}

// TestBoundAtCreate: a request whose layer the builder already has is answered bound,
// with its binding and both audit events, and is never queued for a build; any other is
// queued as before.
func TestBoundAtCreate(t *testing.T) {
	b := &binder{}
	e := newEnv(t, func(o *broker.Options) { o.Builder = b })
	r := e.request(e.agentA, e.sesA, `"ready==1.0"`)
	if r.State != broker.StateBound || r.Digest != "sha256:0b" {
		t.Fatalf("POST: %s %q, want bound to sha256:0b", r.State, r.Digest)
	}
	var env broker.Env
	e.mustDo("GET", "/v1/sessions/"+e.sesA+"/env", e.agentA, "", "", http.StatusOK, &env)
	if len(env.Bindings) != 1 || env.Bindings[0].RequestID != r.ID || len(env.Requests) != 0 {
		t.Errorf("env: bindings %+v, open %+v; want the binding of %s and nothing open", env.Bindings, env.Requests, r.ID)
	}
	actions := e.auditOf(e.sesA, r.ID, false)
	if len(actions) != 2 || actions[0] != "request.create" || actions[1] != "bound" {
		t.Errorf("audit of %s: %v, want [request.create bound]", r.ID, actions)
	}
	q := e.request(e.agentA, e.sesA, `"foo==1.0"`)
	if got := b.enqueued(); len(got) != 1 || got[0] != q.ID || q.State != broker.StateApproved {
		t.Errorf("queued %v (the other request %s is %s), want only %s", got, q.ID, q.State, q.ID)
	}
}

// countingStore counts the reads of a session's bindings and requests that GET env makes.
type countingStore struct {
	broker.Store
	mu    sync.Mutex
	reads int
}

func (c *countingStore) Bindings(ctx context.Context, id string) ([]broker.Binding, error) {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
	return c.Store.Bindings(ctx, id)
}

func (c *countingStore) ListRequests(ctx context.Context, f broker.RequestFilter) ([]broker.Request, error) {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
	return c.Store.ListRequests(ctx, f)
}

func (c *countingStore) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// versionedCounting is a countingStore that keeps session versions, as the SQL stores do.
type versionedCounting struct{ *countingStore }

func (versionedCounting) VersionsSessions() {}

// TestEnvOfANewSessionReadsNothing: a session at version 0 of a store that keeps versions
// has nothing bound or asked, so env reads only its row; a store that does not say so is
// read every time; after a request, either is read once per version.
func TestEnvOfANewSessionReadsNothing(t *testing.T) {
	for _, versioned := range []bool{true, false} {
		var cs *countingStore
		e := newEnv(t, func(o *broker.Options) {
			cs = &countingStore{Store: o.Store}
			o.Store = cs
			if versioned {
				o.Store = versionedCounting{cs}
			}
		})
		get := func() broker.Env {
			t.Helper()
			var env broker.Env
			e.mustDo("GET", "/v1/sessions/"+e.sesA+"/env", e.agentA, "", "", http.StatusOK, &env)
			return env
		}
		for range 3 {
			if env := get(); len(env.Requests) != 0 || len(env.Bindings) != 0 || env.Bindings == nil || env.Requests == nil {
				t.Fatalf("versioned=%v: a new session's env: %+v, want empty lists", versioned, env)
			}
		}
		want := 0
		if !versioned {
			want = 6
		}
		if n := cs.count(); n != want {
			t.Errorf("versioned=%v: 3 env polls of a new session read bindings and requests %d times, want %d", versioned, n, want)
		}
		r := e.request(e.agentA, e.sesA, `"foo==1.0"`)
		before := cs.count()
		for range 2 {
			if env := get(); len(env.Requests) != 1 || env.Requests[0].ID != r.ID {
				t.Fatalf("versioned=%v: after a request: open %+v, want %s", versioned, env.Requests, r.ID)
			}
		}
		if n := cs.count() - before; n != 2 { // its bindings and requests, once, at the new version
			t.Errorf("versioned=%v: 2 polls after a request read %d times, want 2", versioned, n)
		}
	}
}
