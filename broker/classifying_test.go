package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// gatedClassifier is a broker.Deferred classifier whose classifications wait for the
// test: each waits for a value on gate (nil: classify as fakeClassifier does; an error:
// fail with it). It knows the specs listed in known.
type gatedClassifier struct {
	gate  chan error
	mu    sync.Mutex
	known map[string]bool
	calls int
}

func (g *gatedClassifier) Classify(ctx context.Context, s broker.Session, specs []string, up *broker.Upload) (broker.Request, error) {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	if up == nil {
		select {
		case err := <-g.gate:
			if err != nil {
				return broker.Request{}, err
			}
		case <-ctx.Done():
			return broker.Request{}, fmt.Errorf("%w: %w", broker.ErrUnavailable, ctx.Err())
		}
	}
	return fakeClassifier{}.Classify(ctx, s, specs, up)
}

func (g *gatedClassifier) Known(_ broker.Session, specs []string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.known[strings.Join(specs, " ")]
}

// ask posts a request for specs preferring an asynchronous answer; it returns the status,
// the Preference-Applied header and the request.
func (e *env) ask(token, session, specs string) (int, string, broker.Request) {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.ts.URL+"/v1/sessions/"+session+"/requests", strings.NewReader(`{"packages": [`+specs+`]}`))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Prefer", "wait=5, Respond-Async")
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var r broker.Request
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		e.t.Fatalf("decoding the answer (%d): %v", resp.StatusCode, err)
	}
	return resp.StatusCode, resp.Header.Get("Preference-Applied"), r
}

func (e *env) storedReq(id string) broker.Request {
	e.t.Helper()
	r, err := e.store.GetRequest(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// TestAsyncRequest: with Prefer: respond-async, a request whose classification is not
// known is answered 202 classifying at once, while its classification waits; it is then
// classified in the background (audited as request.classify) and queued for the builder.
// A client that did not ask is answered at once.
func TestAsyncRequest(t *testing.T) {
	g := &gatedClassifier{gate: make(chan error), known: map[string]bool{"known==1.0": true}}
	e := newEnv(t, func(o *broker.Options) { o.Classifier = g })
	code, applied, r := e.ask(e.agentA, e.sesA, `"foo==1.0"`)
	if code != http.StatusAccepted || applied != "respond-async" || r.State != broker.StateClassifying || r.ID == "" {
		t.Fatalf("async request: %d %q %+v, want 202 classifying, Preference-Applied: respond-async", code, applied, r)
	}
	if got := e.storedReq(r.ID); got.State != broker.StateClassifying {
		t.Fatalf("stored as %s, want classifying", got.State)
	}
	g.gate <- nil // the classification goes on
	waitFor(t, "the request classified", func() bool { return e.storedReq(r.ID).State != broker.StateClassifying })
	got := e.storedReq(r.ID)
	if got.State != broker.StateApproved || got.Decision != "auto-approved" || len(got.Packages) != 1 || got.Error != "" {
		t.Fatalf("after classification: %+v, want approved with its package", got)
	}
	waitFor(t, "the request queued", func() bool { return len(e.builder.enqueued()) == 1 })
	if q := e.builder.enqueued(); len(q) != 1 || q[0] != r.ID {
		t.Errorf("queued %v, want [%s]", q, r.ID)
	}
	if actions := e.auditOf(e.sesA, r.ID, true); strings.Join(actions, " ") != "request.create/ request.classify/auto-approved" {
		t.Errorf("audit of the request: %v, want request.create then request.classify/auto-approved", actions)
	}

	close(g.gate) // from here every classification goes through at once
	if code, applied, k := e.ask(e.agentA, e.sesA, `"deny-me"`); code != http.StatusAccepted || applied == "" {
		t.Errorf("async request: %d %q", code, applied)
	} else {
		waitFor(t, "the rejection", func() bool { return e.storedReq(k.ID).State == broker.StateRejected })
	}
	if sync := e.request(e.agentA, e.sesA, `"pend-x"`); sync.State != broker.StatePending {
		t.Errorf("a request without Prefer: %s, want pending at once", sync.State)
	}
}

// TestAsyncRequestKnown: a classification the classifier knows is not deferred.
func TestAsyncRequestKnown(t *testing.T) {
	g := &gatedClassifier{gate: make(chan error, 1), known: map[string]bool{"known==1.0": true}}
	g.gate <- nil
	e := newEnv(t, func(o *broker.Options) { o.Classifier = g })
	code, applied, r := e.ask(e.agentA, e.sesA, `"known==1.0"`)
	if code != http.StatusCreated || applied != "" || r.State != broker.StateApproved {
		t.Fatalf("known classification: %d %q %s, want 201 approved at once, no preference applied", code, applied, r.State)
	}
}

// TestAsyncRequestRetries: a failure to classify (the index is down) is not a decision:
// the request stays classifying with the failure in its error, and is retried until it
// is classified.
func TestAsyncRequestRetries(t *testing.T) {
	g := &gatedClassifier{gate: make(chan error, 2)}
	g.gate <- fmt.Errorf("%w: dial tcp 127.0.0.1:9: connection refused", broker.ErrUnavailable)
	e := newEnv(t, func(o *broker.Options) { o.Classifier = g })
	code, _, r := e.ask(e.agentA, e.sesA, `"foo==1.0"`)
	if code != http.StatusAccepted {
		t.Fatalf("async request: %d", code)
	}
	waitFor(t, "the failure recorded", func() bool { return e.storedReq(r.ID).Error != "" })
	got := e.storedReq(r.ID)
	if got.State != broker.StateClassifying || !strings.Contains(got.Error, "connection refused") || !strings.Contains(got.Error, "retrying") {
		t.Fatalf("after a failed classification: %s %q, want classifying, naming the failure and the retry", got.State, got.Error)
	}
	g.gate <- nil
	waitFor(t, "the retry", func() bool { return e.storedReq(r.ID).State == broker.StateApproved })
	if got := e.storedReq(r.ID); got.Error != "" {
		t.Errorf("classified, yet its error still says %q", got.Error)
	}
}

// TestSweepClassifying: a request left classifying (its replica died) is classified by a
// sweep; one another replica classified meanwhile is left as it is.
func TestSweepClassifying(t *testing.T) {
	g := &gatedClassifier{gate: make(chan error)}
	close(g.gate)
	e := newEnv(t, func(o *broker.Options) { o.Classifier = g })
	ctx := context.Background()
	old := time.Now().UTC().Add(-time.Hour)
	for _, id := range []string{"req_left", "req_fresh"} {
		r := broker.Request{ID: id, SessionID: e.sesA, Specs: []string{"foo==1.0"}, State: broker.StateClassifying, Created: old, Updated: old}
		if id == "req_fresh" {
			r.Updated = time.Now().UTC()
		}
		if err := e.store.CreateRequest(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.srv.SweepClassifying(ctx, broker.DefaultClassifyStale); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the abandoned request classified", func() bool { return e.storedReq("req_left").State == broker.StateApproved })
	if st := e.storedReq("req_fresh").State; st != broker.StateClassifying {
		t.Errorf("a request classifying for moments only was taken by the sweep: %s", st)
	}
	// Another replica's classification came first: Classified refuses, nothing changes.
	err := e.store.Classified(ctx, broker.Request{ID: "req_left", SessionID: e.sesA, State: broker.StatePending}, nil,
		broker.AuditEvent{Time: time.Now(), Actor: "broker", Action: "request.classify", SessionID: e.sesA, RequestID: "req_left"})
	if !errors.Is(err, broker.ErrConflict) {
		t.Errorf("classifying a classified request again: %v, want ErrConflict", err)
	}
	if err := e.srv.SweepClassifying(ctx, 0); err != nil { // at start: every one
		t.Fatal(err)
	}
	waitFor(t, "the fresh request classified", func() bool { return e.storedReq("req_fresh").State == broker.StateApproved })
}
