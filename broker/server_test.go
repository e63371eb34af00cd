package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

type fakeRebaser struct{ st broker.Store }

func (f fakeRebaser) Rebase(ctx context.Context, id, actor string) (broker.Session, error) {
	d := "sha256:" + strings.Repeat("b", 64)
	se, err := f.st.GetSession(ctx, id)
	if err != nil {
		return se, err
	}
	bs, err := f.st.Bindings(ctx, id)
	if err != nil {
		return se, err
	}
	if err := f.st.ApplyRebase(ctx, broker.RebasePlan{SessionID: id, FromBase: se.Base, Base: d, Bindings: bs,
		Audit: []broker.AuditEvent{{Actor: actor, Action: "session.rebase", SessionID: id, Detail: "base " + se.Base + " -> " + d}}}); err != nil {
		return se, err
	}
	return f.st.GetSession(ctx, id)
}

type fakeLayers struct{}

func (fakeLayers) Layers(context.Context) ([]broker.Layer, error) {
	return []broker.Layer{{Kind: "base", Ref: "r:base-1", Digest: "sha256:01"}}, nil
}
func (fakeLayers) GC(context.Context) (broker.GCReport, error) {
	return broker.GCReport{Removed: []string{"sha256:02"}, FreedBytes: 9}, nil
}

func TestEndpoints(t *testing.T) {
	var e *env
	e = newEnv(t, func(o *broker.Options) {
		o.Rebaser = fakeRebaser{o.Store}
		o.Layers, o.GC = fakeLayers{}, fakeLayers{}
	})
	e.mustDo("GET", "/healthz", "", "", "", 200, nil)

	// Agent: env, auto-approved request handed to the builder, pending request.
	var en broker.Env
	e.mustDo("GET", "/v1/sessions/"+e.sesA+"/env", e.agentA, "", "", 200, &en)
	if en.Session.ID != e.sesA || len(en.Base) != 0 || len(en.Bindings) != 0 {
		t.Errorf("env = %+v", en)
	}
	ok := e.request(e.agentA, e.sesA, `"python-docx==1.1.2"`)
	if ok.State != broker.StateApproved || ok.SessionID != e.sesA || !slices.Equal(ok.Specs, []string{"python-docx==1.1.2"}) {
		t.Errorf("auto-approved request = %+v", ok)
	}
	if got := e.builder.enqueued(); !slices.Equal(got, []string{ok.ID}) {
		t.Errorf("enqueued %v, want [%s]", got, ok.ID)
	}
	rej := e.request(e.agentA, e.sesA, `"denyme"`)
	if rej.State != broker.StateRejected || len(rej.Reasons) == 0 {
		t.Errorf("rejected request = %+v", rej)
	}
	pend := e.request(e.agentA, e.sesA, `"pendme>=1"`)
	iso := e.request(e.agentA, e.sesA, `"isome<2"`)
	var got broker.Request
	e.mustDo("GET", "/v1/requests/"+pend.ID, e.agentA, "", "", 200, &got)
	if got.State != broker.StatePending {
		t.Errorf("GET pending = %+v", got)
	}
	e.mustDo("GET", "/v1/sessions/"+e.sesA+"/env", e.agentA, "", "", 200, &en)
	if len(en.Requests) != 3 { // approved, pending, iso pending; rejected is terminal
		t.Errorf("open requests = %d, want 3", len(en.Requests))
	}

	// Owner: lists, approve, deny, isolated approve.
	var ss struct{ Sessions []broker.Session }
	e.mustDo("GET", "/v1/sessions", e.alice, "", "", 200, &ss)
	if len(ss.Sessions) != 1 || ss.Sessions[0].ID != e.sesA {
		t.Errorf("alice's sessions = %+v", ss.Sessions)
	}
	e.mustDo("GET", "/v1/sessions", e.admin, "", "", 200, &ss)
	if len(ss.Sessions) != 2 {
		t.Errorf("admin sees %d sessions, want 2", len(ss.Sessions))
	}
	var rs struct{ Requests []broker.Request }
	e.mustDo("GET", "/v1/requests?state=pending", e.alice, "", "", 200, &rs)
	if len(rs.Requests) != 2 {
		t.Errorf("pending = %+v", rs.Requests)
	}
	e.mustDo("GET", "/v1/requests?state=pending", e.bob, "", "", 200, &rs)
	if len(rs.Requests) != 0 {
		t.Errorf("bob sees alice's requests: %+v", rs.Requests)
	}
	e.mustDo("POST", "/v1/requests/"+pend.ID+"/approve", e.alice, "", "", 200, &got)
	if got.State != broker.StateApproved || got.Approver != "alice" || got.BuildIsolated() {
		t.Errorf("approved = %+v", got)
	}
	e.mustDo("POST", "/v1/requests/"+pend.ID+"/approve", e.alice, "", "", http.StatusConflict, nil)
	e.mustDo("POST", "/v1/requests/"+iso.ID+"/approve", e.admin, "application/json", `{"isolated": true}`, 200, &got)
	if !got.BuildIsolated() || got.Approver != "root" {
		t.Errorf("isolated approval = %+v", got)
	}
	if n := len(e.builder.enqueued()); n != 3 {
		t.Errorf("enqueued %d, want 3", n)
	}
	den := e.request(e.agentA, e.sesA, `"pendtoo"`)
	e.mustDo("POST", "/v1/requests/"+den.ID+"/deny", e.alice, "application/json", `{"reason": "use the stdlib"}`, 200, &got)
	if got.State != broker.StateDenied || !strings.Contains(strings.Join(got.Reasons, ";"), "use the stdlib") {
		t.Errorf("denied = %+v", got)
	}

	// Rebase, layers, gc, audit.
	var se broker.Session
	e.mustDo("POST", "/v1/sessions/"+e.sesA+"/rebase", e.alice, "", "", 200, &se)
	if se.Base == "" {
		t.Errorf("rebased session = %+v", se)
	}
	var ls struct{ Layers []broker.Layer }
	e.mustDo("GET", "/v1/layers", e.alice, "", "", 200, &ls)
	if len(ls.Layers) != 1 {
		t.Errorf("layers = %+v", ls)
	}
	e.mustDo("POST", "/v1/gc", e.admin, "", "", 200, nil)
	var au struct{ Events []broker.AuditEvent }
	e.mustDo("GET", "/v1/audit?session="+e.sesA, e.alice, "", "", 200, &au)
	var actions []string
	for _, ev := range au.Events {
		actions = append(actions, ev.Actor+":"+ev.Action)
		if strings.HasPrefix(ev.Actor, broker.TokenPrefix) {
			t.Errorf("audit actor is a token: %+v", ev)
		}
	}
	for _, want := range []string{"alice:session.create", e.sesA + ":request.create", "alice:request.approved",
		"root:request.approved-isolated", "alice:request.denied", "alice:session.rebase"} {
		if !slices.Contains(actions, want) {
			t.Errorf("audit of session A lacks %s: %v", want, actions)
		}
	}
	e.mustDo("GET", "/v1/audit", e.bob, "", "", 200, &au)
	for _, ev := range au.Events {
		if ev.SessionID != e.sesB {
			t.Errorf("bob sees event %+v", ev)
		}
	}
	e.mustDo("GET", "/v1/audit", e.admin, "", "", 200, &au)
	if !slices.ContainsFunc(au.Events, func(ev broker.AuditEvent) bool { return ev.Action == "gc" }) {
		t.Error("admin's audit log lacks the gc event")
	}

	// Metrics reflect routes and states.
	code, h, body := e.do("GET", "/metrics", "", "", "")
	for _, want := range []string{
		`pylayer_http_requests_total{code="201",route="POST /v1/sessions/{id}/requests"} 5`,
		`pylayer_http_request_duration_seconds_bucket{route="GET /healthz",le="+Inf"} 1`,
		`pylayer_requests{state="denied"} 1`, `pylayer_requests{state="approved"} 3`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		t.Errorf("metrics: %d %s", code, h.Get("Content-Type"))
	}
	e.checkNoSecretsLogged()
}

func (e *env) checkNoSecretsLogged() {
	e.t.Helper()
	logs := e.logs.String()
	if logs == "" {
		e.t.Fatal("nothing logged")
	}
	for _, s := range e.secrets {
		if strings.Contains(logs, s) || strings.Contains(logs, s[len(broker.TokenPrefix):]) {
			e.t.Errorf("a token secret is in the log")
		}
	}
	if strings.Contains(strings.ToLower(logs), "bearer") || strings.Contains(logs, "pyl_") {
		e.t.Errorf("the log mentions a bearer token:\n%s", logs)
	}
	for _, want := range []string{`"route":"POST /v1/sessions/{id}/requests"`, `"subject":"alice"`, `"role":"owner"`, `"status":201`, `"method":"POST"`, `"duration"`} {
		if !strings.Contains(logs, want) {
			e.t.Errorf("the log lacks %s", want)
		}
	}
}

func TestNoRebaser(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.DataDir = "" }) // with a data dir, gc collects uploads

	before := e.snapshot()
	for _, p := range []string{"POST /v1/sessions/" + e.sesA + "/rebase", "GET /v1/layers", "POST /v1/gc"} {
		m, path, _ := strings.Cut(p, " ")
		e.mustDo(m, path, e.admin, "", "", http.StatusNotImplemented, nil)
	}
	e.unchanged("unconfigured endpoints", before)
}

func TestAuthMatrix(t *testing.T) {
	e := newEnv(t, nil)
	pendA := e.request(e.agentA, e.sesA, `"pendme"`)
	pendB := e.request(e.agentB, e.sesB, `"pendme"`)
	bad := "pyl_" + strings.Repeat("A", 43)
	js := "application/json"
	for _, tc := range []struct {
		name, method, path, token, ctype, body string
		want                                   int
	}{
		{"no token", "GET", "/v1/sessions", "", "", "", 401},
		{"bad token", "GET", "/v1/sessions", bad, "", "", 401},
		{"not a pyl token", "GET", "/v1/sessions", "hunter2", "", "", 401},
		{"no token request", "POST", "/v1/sessions/" + e.sesA + "/requests", "", js, `{"packages":["a"]}`, 401},
		{"agent other env", "GET", "/v1/sessions/" + e.sesB + "/env", e.agentA, "", "", 403},
		{"agent missing session env", "GET", "/v1/sessions/ses_nope/env", e.agentA, "", "", 403},
		{"agent other request", "GET", "/v1/requests/" + pendB.ID, e.agentA, "", "", 403},
		{"agent missing request", "GET", "/v1/requests/req_nope", e.agentA, "", "", 403},
		{"agent requests for other", "POST", "/v1/sessions/" + e.sesB + "/requests", e.agentA, js, `{"packages":["a"]}`, 403},
		{"agent approving", "POST", "/v1/requests/" + pendA.ID + "/approve", e.agentA, "", "", 403},
		{"agent denying", "POST", "/v1/requests/" + pendA.ID + "/deny", e.agentA, js, `{"reason":"x"}`, 403},
		{"agent lists sessions", "GET", "/v1/sessions", e.agentA, "", "", 403},
		{"agent creates session", "POST", "/v1/sessions", e.agentA, js, `{}`, 403},
		{"agent reads audit", "GET", "/v1/audit?session=" + e.sesA, e.agentA, "", "", 403},
		{"agent gc", "POST", "/v1/gc", e.agentA, "", "", 403},
		{"owner approves other's", "POST", "/v1/requests/" + pendB.ID + "/approve", e.alice, "", "", 403},
		{"owner denies other's", "POST", "/v1/requests/" + pendB.ID + "/deny", e.alice, js, `{"reason":"x"}`, 403},
		{"owner env of other's", "GET", "/v1/sessions/" + e.sesB + "/env", e.alice, "", "", 403},
		{"owner requests on other's", "POST", "/v1/sessions/" + e.sesB + "/requests", e.alice, js, `{"packages":["a"]}`, 403},
		{"owner rebases other's", "POST", "/v1/sessions/" + e.sesB + "/rebase", e.alice, "", "", 403},
		{"owner audit of other's", "GET", "/v1/audit?session=" + e.sesB, e.alice, "", "", 403},
		{"owner session for other", "POST", "/v1/sessions", e.alice, js, `{"owner":"bob"}`, 403},
		{"owner gc", "POST", "/v1/gc", e.alice, "", "", 403},
		{"owner missing request", "POST", "/v1/requests/req_nope/approve", e.alice, "", "", 404},
		{"admin missing session", "GET", "/v1/sessions/ses_nope/env", e.admin, "", "", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshot()
			code, h, body := e.do(tc.method, tc.path, tc.token, tc.ctype, tc.body)
			if code != tc.want {
				t.Errorf("%d %s, want %d", code, body, tc.want)
			}
			var ae struct{ Error string }
			if json.Unmarshal(body, &ae) != nil || ae.Error == "" {
				t.Errorf("body %s is not a JSON error", body)
			}
			if code == 401 && h.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			e.unchanged(tc.name, before)
		})
	}
	// Admin may act on anyone's session.
	e.mustDo("POST", "/v1/requests/"+pendB.ID+"/approve", e.admin, "", "", 200, nil)
	e.mustDo("GET", "/v1/sessions/"+e.sesB+"/env", e.admin, "", "", 200, nil)
	e.mustDo("POST", "/v1/sessions", e.admin, js, `{"owner":"carol"}`, 201, nil)
	e.checkNoSecretsLogged()
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.MaxBody = 4096 })
	pend := e.request(e.agentA, e.sesA, `"pendme"`)
	done := e.request(e.agentA, e.sesA, `"ok"`)
	reqs := "/v1/sessions/" + e.sesA + "/requests"
	js := "application/json"
	for _, tc := range []struct {
		name, method, path, token, ctype, body string
		want                                   int
	}{
		{"malformed JSON", "POST", reqs, e.agentA, js, `{"packages":`, 400},
		{"not an object", "POST", reqs, e.agentA, js, `["a"]`, 400},
		{"unknown field", "POST", reqs, e.agentA, js, `{"packages":["a"],"x":1}`, 400},
		{"trailing data", "POST", reqs, e.agentA, js, `{"packages":["a"]} {}`, 400},
		{"trailing brace", "POST", reqs, e.agentA, js, `{"packages":["a"]}}`, 400},
		{"no packages", "POST", reqs, e.agentA, js, `{"packages":[]}`, 400},
		{"invalid requirement", "POST", reqs, e.agentA, js, `{"packages":["foo>=>1"]}`, 400},
		{"bad name", "POST", reqs, e.agentA, js, `{"packages":["-foo"]}`, 400},
		{"url requirement", "POST", reqs, e.agentA, js, `{"packages":["foo @ https://evil/x.whl"]}`, 400},
		{"too many", "POST", reqs, e.agentA, js, `{"packages":[` + strings.Repeat(`"a",`, 64) + `"a"]}`, 400},
		{"too large", "POST", reqs, e.agentA, js, `{"packages":["` + strings.Repeat("a", 5000) + `"]}`, 413},
		{"wrong content type", "POST", reqs, e.agentA, "text/plain", `{"packages":["a"]}`, 415},
		{"no content type", "POST", reqs, e.agentA, "", `{"packages":["a"]}`, 415},
		{"classifier failure", "POST", reqs, e.agentA, js, `{"packages":["boom"]}`, 500},
		{"deny without reason", "POST", "/v1/requests/" + pend.ID + "/deny", e.alice, js, `{}`, 400},
		{"deny blank reason", "POST", "/v1/requests/" + pend.ID + "/deny", e.alice, js, `{"reason":"  "}`, 400},
		{"deny no body", "POST", "/v1/requests/" + pend.ID + "/deny", e.alice, "", "", 415},
		{"isolated not offered", "POST", "/v1/requests/" + pend.ID + "/approve", e.alice, js, `{"isolated":true}`, 400},
		{"approve bad body", "POST", "/v1/requests/" + pend.ID + "/approve", e.alice, js, `{"isolated":"yes"}`, 400},
		{"approve not pending", "POST", "/v1/requests/" + done.ID + "/approve", e.alice, "", "", 409},
		{"deny not pending", "POST", "/v1/requests/" + done.ID + "/deny", e.alice, js, `{"reason":"x"}`, 409},
		{"bad wait", "GET", "/v1/requests/" + pend.ID + "?wait=soon", e.agentA, "", "", 400},
		{"negative wait", "GET", "/v1/requests/" + pend.ID + "?wait=-1s", e.agentA, "", "", 400},
		{"bad state filter", "GET", "/v1/requests?state=nope", e.alice, "", "", 400},
		{"bad digest", "POST", "/v1/sessions", e.alice, js, `{"base":"sha256:xyz"}`, 400},
		{"bad base lock", "POST", "/v1/sessions", e.alice, js, `{"base_lock":{"version":1}}`, 400},
		{"method not allowed", "DELETE", "/v1/sessions", e.admin, "", "", 405},
		{"unknown path", "GET", "/v2/nothing", e.admin, "", "", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshot()
			code, _, body := e.do(tc.method, tc.path, tc.token, tc.ctype, tc.body)
			if code != tc.want {
				t.Errorf("%d %s, want %d", code, body, tc.want)
			}
			var ae struct{ Error, Hint string }
			if json.Unmarshal(body, &ae) != nil || ae.Error == "" {
				t.Errorf("body %s is not a JSON error", body)
			}
			if code == 500 && strings.Contains(ae.Error, "EOF") {
				t.Errorf("a 500 leaks internals: %s", body)
			}
			e.unchanged(tc.name, before)
		})
	}
}

func TestLongPoll(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		change func(id string)
		want   broker.State
	}{
		{"deny through the API", func(id string) {
			e.mustDo("POST", "/v1/requests/"+id+"/deny", e.alice, "application/json", `{"reason":"no"}`, 200, nil)
		}, broker.StateDenied},
		{"builder binds and notifies", func(id string) {
			for _, st := range []broker.State{broker.StateApproved, broker.StateBuilding, broker.StateBound} {
				if err := e.store.UpdateRequest(ctx, id, func(r *broker.Request) error { r.State = st; return nil }); err != nil {
					t.Error(err)
				}
				e.srv.Notify(id)
			}
		}, broker.StateBound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.request(e.agentA, e.sesA, `"pendme"`)
			type result struct {
				r broker.Request
				d time.Duration
			}
			res := make(chan result, 1)
			go func() {
				start := time.Now()
				var got broker.Request
				e.mustDo("GET", "/v1/requests/"+r.ID+"?wait=50s", e.agentA, "", "", 200, &got)
				res <- result{got, time.Since(start)}
			}()
			waitFor(t, "the long poll to wait", func() bool { return broker.Watched(e.srv) > 0 })
			tc.change(r.ID)
			got := <-res
			if got.r.State != tc.want {
				t.Errorf("long poll returned %s, want %s", got.r.State, tc.want)
			}
			// Far below the 2s recheck: the notification woke it.
			if got.d > time.Second+500*time.Millisecond {
				t.Errorf("long poll took %s", got.d)
			}
		})
	}
	t.Run("wait ends", func(t *testing.T) {
		r := e.request(e.agentA, e.sesA, `"pendme"`)
		start := time.Now()
		var got broker.Request
		e.mustDo("GET", "/v1/requests/"+r.ID+"?wait=300ms", e.agentA, "", "", 200, &got)
		if d := time.Since(start); got.State != broker.StatePending || d < 300*time.Millisecond || d > 10*time.Second {
			t.Errorf("after %s: %s", d, got.State)
		}
	})
	t.Run("terminal returns at once", func(t *testing.T) {
		r := e.request(e.agentA, e.sesA, `"denyme"`)
		start := time.Now()
		e.mustDo("GET", "/v1/requests/"+r.ID+"?wait=30s", e.agentA, "", "", 200, nil)
		if d := time.Since(start); d > 10*time.Second { // a poll that waits would take 30 s
			t.Errorf("took %s", d)
		}
	})
}

func TestConcurrentClients(t *testing.T) {
	e := newEnv(t, nil)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			var path, body, tok, ctype string
			method, want := "GET", 200
			switch i % 4 {
			case 0:
				method, path, tok, ctype, body, want = "POST", "/v1/sessions/"+e.sesA+"/requests", e.agentA, "application/json", fmt.Sprintf(`{"packages":["pkg%d==1"]}`, i), 201
			case 1:
				path, tok = "/v1/sessions/"+e.sesB+"/env", e.agentB
			case 2:
				path, tok = "/v1/requests?state=approved", e.admin
			case 3:
				path, tok, want = "/v1/sessions/"+e.sesB+"/env", e.agentA, 403
			}
			req, _ := http.NewRequest(method, e.ts.URL+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tok)
			if ctype != "" {
				req.Header.Set("Content-Type", ctype)
			}
			resp, err := e.ts.Client().Do(req)
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				errs <- fmt.Errorf("%s %s: %d, want %d", method, path, resp.StatusCode, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	l, _ := e.store.ListRequests(context.Background(), broker.RequestFilter{SessionID: e.sesA})
	if len(l) != n/4 || len(e.builder.enqueued()) != n/4 {
		t.Errorf("%d requests stored, %d enqueued; want %d", len(l), len(e.builder.enqueued()), n/4)
	}
}

func TestOpenAPI(t *testing.T) {
	e := newEnv(t, nil)
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	e.mustDo("GET", "/openapi.json", "", "", "", 200, &doc)
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q", doc.OpenAPI)
	}
	documented := 0
	for _, rt := range e.srv.Routes() {
		m, path, _ := strings.Cut(rt, " ")
		ops, ok := doc.Paths[path]
		if !ok || ops[strings.ToLower(m)] == nil {
			t.Errorf("route %s is not in openapi.json", rt)
		}
		documented++
	}
	n := 0
	for _, ops := range doc.Paths {
		n += len(ops)
	}
	if n != documented {
		t.Errorf("openapi.json documents %d operations, the server has %d routes", n, documented)
	}
}

func TestNewServerRequires(t *testing.T) {
	if _, err := broker.NewServer(broker.Options{}); err == nil {
		t.Error("NewServer without a store succeeded")
	}
}

func TestNewToken(t *testing.T) {
	s1, h1 := broker.NewToken()
	s2, _ := broker.NewToken()
	if s1 == s2 || !strings.HasPrefix(s1, "pyl_") || len(s1) != 47 || h1 != broker.HashToken(s1) || len(h1) != 64 {
		t.Errorf("NewToken = %q %q", s1, h1)
	}
}
