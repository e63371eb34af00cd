package broker_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/client"
	"github.com/pylayer/pylayer/layers/lock"
)

// bindingsExecutor is the fake executor that also reads, as broker/executor does, the
// session's bindings from broker.GrantedSessions on every exec.
type bindingsExecutor struct {
	*fakeExecutor
	mu   sync.Mutex
	seen [][]broker.Binding
}

func (b *bindingsExecutor) Exec(ctx context.Context, s broker.Session, req broker.ExecRequest, emit func(broker.ExecEvent)) (broker.ExecResult, error) {
	se, err := broker.GrantedSessions.GetSession(ctx, s.ID)
	if err != nil || se.ID != s.ID {
		return broker.ExecResult{}, err
	}
	bs, err := broker.GrantedSessions.Bindings(ctx, s.ID)
	if err != nil {
		return broker.ExecResult{}, err
	}
	b.mu.Lock()
	b.seen = append(b.seen, bs)
	b.mu.Unlock()
	return b.fakeExecutor.Exec(ctx, s, req, emit)
}

// execHost is a sandbox host in front of the broker of e: it counts the broker's env calls.
type execHost struct {
	url    string
	fx     *bindingsExecutor
	envs   atomic.Int64
	broker *httptest.Server
}

func newExecHost(t *testing.T, e *env, ttl time.Duration) *execHost {
	t.Helper()
	h := &execHost{fx: &bindingsExecutor{fakeExecutor: newFakeExecutor()}}
	// the broker, behind a counter of its env calls
	h.broker = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/env") {
			h.envs.Add(1)
		}
		e.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(h.broker.Close)
	c, err := client.New(h.broker.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := broker.NewExecHost(broker.ExecHostOptions{Executor: h.fx, Authority: client.NewAuthority(c),
		GrantTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv)
	ts.Config = srv.HTTPServer()
	ts.Start()
	t.Cleanup(ts.Close)
	h.url = ts.URL
	return h
}

func (h *execHost) do(t *testing.T, method, path, token, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestExecHostAuth: a sandbox host runs a call only when the broker answers the caller's
// own token with the session's env; the broker's 401, 403 and 404 are its answers.
func TestExecHostAuth(t *testing.T) {
	e := newEnv(t, nil)
	h := newExecHost(t, e, -1)
	exec := `{"code": "x = 1"}`
	for _, c := range []struct {
		who, token, session string
		code                int
	}{
		{"agent A", e.agentA, e.sesA, 200},
		{"alice, the owner", e.alice, e.sesA, 200},
		{"the admin", e.admin, e.sesB, 200},
		{"agent B", e.agentB, e.sesA, 403},
		{"bob, another owner", e.bob, e.sesA, 403},
		{"an unknown token", "pyl_nosuchtoken", e.sesA, 401},
		{"no token", "", e.sesA, 401},
		{"a malformed token", "secret", e.sesA, 401},
		{"the admin, no such session", e.admin, "ses_nosuch", 404},
	} {
		code, b := h.do(t, "POST", "/v1/sessions/"+c.session+"/exec", c.token, exec)
		if code != c.code {
			t.Errorf("%s: exec = %d %s, want %d", c.who, code, b, c.code)
		}
	}
	want := []string{e.sesA + ":exec", e.sesA + ":exec", e.sesB + ":exec"}
	if got := h.fx.called(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("calls that reached the executor: %v, want %v", got, want)
	}
	// the files and runs routes are authorised the same way
	if code, b := h.do(t, "PUT", "/v1/sessions/"+e.sesA+"/files/a.txt", e.agentA, "hello"); code != 200 {
		t.Errorf("agent A's put: %d %s", code, b)
	}
	if code, _ := h.do(t, "GET", "/v1/sessions/"+e.sesA+"/files/a.txt", e.agentB, ""); code != 403 {
		t.Errorf("agent B's get of A's file: %d", code)
	}
	var l broker.RunList
	code, b := h.do(t, "GET", "/v1/sessions/"+e.sesA+"/runs", e.agentA, "")
	if err := json.Unmarshal(b, &l); code != 200 || err != nil || len(l.Runs) != 2 {
		t.Errorf("agent A's runs: %d %s", code, b)
	}
	// the broker gone: 503, nothing ran
	n := len(h.fx.called())
	h.broker.Close()
	if code, b := h.do(t, "POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, exec); code != 503 || len(h.fx.called()) != n {
		t.Errorf("with the broker down: %d %s", code, b)
	}
}

// TestExecHostCancel: a run is cancelled on the host that runs it, by a token the broker
// lets use its session; another session's token is refused.
func TestExecHostCancel(t *testing.T) {
	e := newEnv(t, nil)
	h := newExecHost(t, e, 0)
	done := make(chan int, 1)
	go func() {
		code, _ := h.do(t, "POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, `{"code": "block"}`)
		done <- code
	}()
	run := <-h.fx.started
	if code, b := h.do(t, "POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, `{"code": "busy"}`); code != 409 || !strings.Contains(string(b), run) {
		t.Errorf("a second call meanwhile: %d %s, want 409 naming %s", code, b, run)
	}
	if code, _ := h.do(t, "POST", "/v1/runs/"+run+"/cancel", e.agentB, ""); code != 403 {
		t.Errorf("agent B cancelling A's run: %d", code)
	}
	if code, _ := h.do(t, "POST", "/v1/runs/nosuch/cancel", e.agentA, ""); code != 404 {
		t.Errorf("cancelling an unknown run: %d", code)
	}
	if code, b := h.do(t, "POST", "/v1/runs/"+run+"/cancel", e.agentA, ""); code != 202 {
		t.Errorf("agent A cancelling its run: %d %s", code, b)
	}
	if code := <-done; code != 200 {
		t.Errorf("the cancelled call: %d", code)
	}
}

// TestExecHostGrants: the broker's yes is kept for a (token, session) for the grant TTL
// (one env call for several exec calls), never its no, never across tokens; with no TTL
// every call asks, so a rebind on the broker reaches the executor on the next call.
func TestExecHostGrants(t *testing.T) {
	e := newEnv(t, nil)
	h := newExecHost(t, e, time.Minute/6) // 10s: no entry expires during the test
	for range 3 {
		if code, b := h.do(t, "POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, `{"code": "1"}`); code != 200 {
			t.Fatalf("exec: %d %s", code, b)
		}
	}
	if n := h.envs.Load(); n != 1 {
		t.Errorf("3 calls of one token asked the broker %d times, want 1", n)
	}
	if code, _ := h.do(t, "POST", "/v1/sessions/"+e.sesA+"/exec", e.alice, `{"code": "1"}`); code != 200 || h.envs.Load() != 2 {
		t.Errorf("another token: %d, %d env calls, want its own", code, h.envs.Load())
	}
	for range 2 {
		if code, _ := h.do(t, "POST", "/v1/sessions/"+e.sesA+"/exec", e.agentB, `{"code": "1"}`); code != 403 {
			t.Errorf("agent B: %d", code)
		}
	}
	if n := h.envs.Load(); n != 4 {
		t.Errorf("two refused calls: %d env calls in all, want 4 (a no is never kept)", n)
	}

	// No TTL: the bindings are the broker's at each call.
	h = newExecHost(t, e, -1)
	h.do(t, "POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, `{"code": "1"}`)
	digest := "sha256:" + strings.Repeat("3", 64)
	ref := "reg.example/team/pylayer@" + digest
	if err := e.store.ReplaceBindings(t.Context(), e.sesA, []broker.Binding{{SessionID: e.sesA, Kind: lock.KindExt, Digest: digest, Ref: ref}}); err != nil {
		t.Fatal(err)
	}
	h.do(t, "POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, `{"code": "1"}`)
	h.fx.mu.Lock()
	seen := h.fx.seen
	h.fx.mu.Unlock()
	if len(seen) != 2 || len(seen[0]) != 0 || len(seen[1]) != 1 || seen[1][0].Ref != ref {
		t.Errorf("bindings the executor read: %+v, want none, then %s", seen, ref)
	}
}

// TestExecHostRoutes: the host serves the executor's routes and the health, metrics and
// OpenAPI ones, nothing of the broker's own; it refuses a grant TTL past the limit.
func TestExecHostRoutes(t *testing.T) {
	e := newEnv(t, nil)
	h := newExecHost(t, e, 0)
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/healthz", 200},
		{"GET", "/readyz", 200},
		{"GET", "/metrics", 200},
		{"GET", "/openapi.json", 200},
		{"GET", "/v1/sessions/" + e.sesA + "/env", 404},
		{"GET", "/v1/requests", 404},
		{"GET", "/ui/", 404},
	} {
		if code, b := h.do(t, c.method, c.path, e.admin, ""); code != c.code {
			t.Errorf("%s %s = %d %.200s, want %d", c.method, c.path, code, b, c.code)
		}
	}
	if _, b := h.do(t, "GET", "/metrics", "", ""); !strings.Contains(string(b), "go_goroutines") {
		t.Errorf("metrics: %.300s", b)
	}
	if _, err := broker.NewExecHost(broker.ExecHostOptions{Executor: newFakeExecutor(), Authority: client.NewAuthority(nil),
		GrantTTL: broker.MaxGrantTTL + time.Second}); err == nil {
		t.Error("a grant TTL past the limit was taken")
	}
}

// TestExecHostSessionIDs: a session id that is not one plain path segment ("..", ".",
// an escaped slash) is refused before the broker is asked: the caller's token goes to
// the broker's env route of that session, never to another route of the broker.
func TestExecHostSessionIDs(t *testing.T) {
	e := newEnv(t, nil)
	h := newExecHost(t, e, -1)
	for _, id := range []string{"%2E%2E", "%2E", "a%2Fb", "..%2Fv1%2Fsessions", "%00", strings.Repeat("s", 200)} {
		code, b := h.do(t, "POST", "/v1/sessions/"+id+"/exec", e.agentA, `{"code": "1"}`)
		if code != 400 || !strings.Contains(string(b), "session id") {
			t.Errorf("session id %q: %d %s, want 400", id, code, b)
		}
	}
	if n := h.envs.Load(); n != 0 {
		t.Errorf("the broker was asked %d times about ids that are not one", n)
	}
	if code, b := h.do(t, "POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, `{"code": "1"}`); code != 200 {
		t.Errorf("a real session: %d %s", code, b)
	}
}
