package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/client"
	"github.com/pylayer/pylayer/broker/sqlite"
	"github.com/pylayer/pylayer/test/fixture"
)

// classifier approves every spec but pend* (pending) and iso* (pending, isolated offered),
// and pends uploads.
type classifier struct{}

func (classifier) Classify(ctx context.Context, s broker.Session, specs []string, up *broker.Upload) (broker.Request, error) {
	r := broker.Request{State: broker.StateApproved, Decision: "auto-approved"}
	switch {
	case up != nil:
		r.State, r.Decision, r.Packages = broker.StatePending, "pending", []broker.Pkg{{Name: "up", Version: "1.0", Filename: up.Filename}}
	case strings.HasPrefix(specs[0], "pend"):
		r.State, r.Decision = broker.StatePending, "pending"
	case strings.HasPrefix(specs[0], "iso"):
		r.State, r.Decision, r.Isolated = broker.StatePending, "pending", true
	}
	return r, nil
}

// seen records what went over the wire: every URL and Authorization header.
type seen struct {
	mu    sync.Mutex
	urls  []string
	auths []string
}

func (s *seen) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.urls, s.auths = append(s.urls, r.URL.String()), append(s.auths, r.Header.Get("Authorization"))
	s.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

type env struct {
	url                 string
	admin, owner, other *client.Client
	wire                *seen
	secrets             []string
	calls               func() []client.Call
}

// newEnv runs a broker over the SQLite store in process, with tokens for an admin and
// owners alice and bob.
func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "broker.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := broker.NewServer(broker.Options{Store: st, Classifier: classifier{}, DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	e := &env{url: ts.URL, wire: &seen{}}
	var mu sync.Mutex
	var calls []client.Call
	e.calls = func() []client.Call { mu.Lock(); defer mu.Unlock(); return slices.Clone(calls) }
	mint := func(role, subject string) *client.Client {
		secret, err := srv.CreateToken(ctx, role, subject)
		if err != nil {
			t.Fatal(err)
		}
		e.secrets = append(e.secrets, secret)
		c, err := client.New(ts.URL+"/", secret, client.WithHTTPClient(&http.Client{Transport: e.wire}),
			client.WithObserver(func(c client.Call) { mu.Lock(); calls = append(calls, c); mu.Unlock() }))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	e.admin, e.owner, e.other = mint(broker.RoleAdmin, "root"), mint(broker.RoleOwner, "alice"), mint(broker.RoleOwner, "bob")
	return e
}

// apiError is err as an *client.Error with status, or a test failure.
func apiError(t *testing.T, err error, status int) *client.Error {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) || e.Status != status {
		t.Fatalf("error %v, want a client.Error with status %d", err, status)
	}
	if e.Message == "" {
		t.Errorf("error %v carries no message from the API", err)
	}
	return e
}

// TestLifecycle drives every call an agent and an approver make, and their errors.
func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)

	cs, err := e.owner.CreateSession(ctx, client.NewSession{})
	if err != nil {
		t.Fatal(err)
	}
	if cs.Session.Owner != "alice" || cs.AgentToken == "" {
		t.Fatalf("CreateSession = %+v", cs)
	}
	e.secrets = append(e.secrets, cs.AgentToken)
	agent := e.owner.WithToken(cs.AgentToken)
	id := cs.Session.ID

	env, err := agent.Env(ctx, id)
	if err != nil || env.Session.ID != id || !env.Degraded {
		t.Fatalf("Env = %+v, %v; want the degraded session %s", env, err, id)
	}
	apiError(t, func() error { _, err := e.other.Env(ctx, id); return err }(), http.StatusForbidden)
	if ss, err := e.owner.Sessions(ctx); err != nil || len(ss) != 1 || ss[0].ID != id {
		t.Errorf("Sessions = %+v, %v", ss, err)
	}

	// Ask; the answers carry the request as the API has it.
	auto, err := agent.Ask(ctx, id, "foo==1.0")
	if err != nil || auto.State != broker.StateApproved || auto.SessionID != id || !slices.Equal(auto.Specs, []string{"foo==1.0"}) {
		t.Fatalf("Ask foo = %+v, %v; want approved", auto, err)
	}
	p, err := agent.Ask(ctx, id, "pend")
	if err != nil || p.State != broker.StatePending {
		t.Fatalf("Ask pend = %+v, %v", p, err)
	}
	bad := apiError(t, func() error { _, err := agent.Ask(ctx, id); return err }(), http.StatusBadRequest)
	if !errors.Is(bad, broker.ErrInvalid) || bad.Hint == "" || bad.Endpoint != "POST /v1/sessions/{id}/requests" {
		t.Errorf("Ask of nothing: %+v, want ErrInvalid with a hint, naming the route", bad)
	}
	if l, err := e.owner.Requests(ctx, client.Filter{State: broker.StatePending}); err != nil || len(l) != 1 || l[0].ID != p.ID {
		t.Errorf("Requests(pending) = %+v, %v; want %s", l, err, p.ID)
	}
	if l, err := e.owner.Requests(ctx, client.Filter{Session: id}); err != nil || len(l) != 2 {
		t.Errorf("Requests(session) = %+v, %v; want 2", l, err)
	}
	apiError(t, func() error { _, err := e.owner.Requests(ctx, client.Filter{State: "nosuch"}); return err }(), http.StatusBadRequest)

	// Decisions: an agent may not decide; a deny needs a reason; isolated needs the offer.
	apiError(t, func() error { _, err := agent.Approve(ctx, p.ID, false); return err }(), http.StatusForbidden)
	if _, err := e.owner.Deny(ctx, p.ID, " "); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("Deny without a reason: %v, want ErrInvalid", err)
	}
	if _, err := e.owner.Approve(ctx, p.ID, true); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("Approve isolated of a request without the offer: %v, want ErrInvalid", err)
	}

	// Wait returns once the request is terminal, whether the deny lands before or during
	// the long poll.
	waited := make(chan broker.Request, 1)
	waitErr := make(chan error, 1)
	go func() {
		r, err := agent.Wait(ctx, p.ID)
		waited <- r
		waitErr <- err
	}()
	d, err := e.owner.Deny(ctx, p.ID, "not for this task")
	if err != nil || d.State != broker.StateDenied || d.Approver != "alice" {
		t.Fatalf("Deny = %+v, %v", d, err)
	}
	if r, err := <-waited, <-waitErr; err != nil || r.State != broker.StateDenied || !strings.Contains(strings.Join(r.Reasons, " "), "not for this task") {
		t.Errorf("Wait = %+v, %v; want denied with the reason", r, err)
	}
	if _, err := e.owner.Deny(ctx, p.ID, "again"); !errors.Is(err, broker.ErrConflict) {
		t.Errorf("Deny of a denied request: %v, want ErrConflict", err)
	}
	iso, err := agent.Ask(ctx, id, "iso")
	if err != nil || !iso.Isolated {
		t.Fatalf("Ask iso = %+v, %v", iso, err)
	}
	if a, err := e.owner.Approve(ctx, iso.ID, true); err != nil || a.State != broker.StateApproved || a.Decision != broker.DecisionApprovedIsolated {
		t.Errorf("Approve isolated = %+v, %v", a, err)
	}

	// A short poll of a request that stays put answers with it as it is.
	still, err := agent.Ask(ctx, id, "pend2")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := agent.Poll(ctx, still.ID, 50*time.Millisecond); err != nil || r.State != broker.StatePending {
		t.Errorf("Poll = %+v, %v; want still pending", r, err)
	}
	if _, err := e.owner.Request(ctx, "req_nosuch"); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("Request of an unknown id: %v, want ErrNotFound", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := agent.Wait(wctx, still.ID); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled context: %v, want context.Canceled", err)
	}

	// Upload a wheel of its own.
	dir := t.TempDir()
	path, err := fixture.Wheel{Name: "up", Version: "1.0"}.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if up, err := agent.Upload(ctx, id, filepath.Base(path), f); err != nil || up.State != broker.StatePending || up.Upload != filepath.Base(path) {
		t.Errorf("Upload = %+v, %v; want pending with the file name", up, err)
	}

	// What the deployment does not configure answers 501; what it does, answers.
	apiError(t, func() error { _, err := e.owner.Rebase(ctx, id); return err }(), http.StatusNotImplemented)
	apiError(t, func() error { _, err := e.owner.Layers(ctx); return err }(), http.StatusNotImplemented)
	apiError(t, func() error { _, err := e.owner.GC(ctx); return err }(), http.StatusForbidden)
	if rep, err := e.admin.GC(ctx); err != nil || rep.Removed == nil {
		t.Errorf("GC = %+v, %v", rep, err)
	}
	events, err := e.owner.Audit(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, ev := range events {
		actions = append(actions, ev.Action)
	}
	for _, want := range []string{"session.create", "request.create", "request.denied", "request.approved-isolated"} {
		if !slices.Contains(actions, want) {
			t.Errorf("audit of %s: %v, want %s among them", id, actions, want)
		}
	}
	if all, err := e.admin.Audit(ctx, ""); err != nil || len(all) < len(events) {
		t.Errorf("Audit(all) = %d events, %v; want at least %d", len(all), err, len(events))
	}

	// The token travels in the Authorization header only; observers see route patterns.
	e.wire.mu.Lock()
	defer e.wire.mu.Unlock()
	for i, u := range e.wire.urls {
		if !strings.HasPrefix(e.wire.auths[i], "Bearer pyl") {
			t.Errorf("%s went with Authorization %q", u, e.wire.auths[i])
		}
		for _, s := range e.secrets {
			if strings.Contains(u, s) {
				t.Errorf("a token is in the URL %s", u)
			}
		}
	}
	endpoints := map[string]bool{}
	for _, c := range e.calls() {
		endpoints[c.Endpoint] = true
		if c.Duration <= 0 {
			t.Errorf("observed %+v: no duration", c)
		}
	}
	for _, want := range []string{"GET /v1/sessions/{id}/env", "GET /v1/requests/{id}", "POST /v1/requests/{id}/deny", "POST /v1/gc"} {
		if !endpoints[want] {
			t.Errorf("the observer never saw %s (saw %v)", want, endpoints)
		}
	}
}

// TestErrors: statuses the broker's dependencies cause, timeouts and bad URLs.
func TestErrors(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/gc":
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error": "temporarily unavailable", "hint": "retry after the Retry-After header's seconds"}`))
		case "/v1/layers":
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte("<html>bad gateway</html>"))
		case "/v1/sessions":
			select { // never answers in time
			case <-r.Context().Done():
			case <-release:
			}
		}
	}))
	defer ts.Close()
	defer close(release)
	c, err := client.New(ts.URL, "secret", client.WithTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.GC(ctx)
	e := apiError(t, err, http.StatusServiceUnavailable)
	if !errors.Is(err, broker.ErrUnavailable) || e.RetryAfter != 5*time.Second || e.Hint == "" {
		t.Errorf("503: %+v, want ErrUnavailable after 5s with a hint", e)
	}
	if errors.Is(err, broker.ErrNotFound) {
		t.Error("a 503 matches ErrNotFound")
	}
	_, err = c.Layers(ctx)
	if e := apiError(t, err, http.StatusBadGateway); !strings.Contains(e.Message, "bad gateway") {
		t.Errorf("a non-JSON answer: message %q, want its text", e.Message)
	}
	if _, err := c.Sessions(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a broker that does not answer: %v, want a deadline", err)
	}
	for _, u := range []string{"", "ftp://h/", "http://", "http://h/?q=1", "http://u:p@h/"} {
		if _, err := client.New(u, ""); err == nil {
			t.Errorf("New(%q): no error", u)
		}
	}
	if _, err := client.New("http://h", "", client.WithTimeout(0)); err == nil {
		t.Error("New with a zero timeout: no error")
	}
}
