package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/sqlite"
)

// fakeClassifier decides by the first spec's prefix: deny* rejected, pend* pending,
// iso* pending with an isolated option, boom* fails; otherwise auto-approved. Uploads pend,
// but deny* uploads are rejected, boom* uploads fail, with the wheel's host path in the
// reason and the error (as a careless classifier would put it).
type fakeClassifier struct {
	noFail bool
	slow   time.Duration // slow* specs take this long, as a resolution that fetches wheels does
}

func (f fakeClassifier) Classify(ctx context.Context, s broker.Session, specs []string, up *broker.Upload) (broker.Request, error) {
	if up != nil {
		if _, err := os.Stat(up.Path); err != nil {
			return broker.Request{}, err
		}
		r := broker.Request{State: broker.StatePending, Decision: "pending", Reasons: []string{"uploaded wheel " + up.Filename},
			Packages: []broker.Pkg{{Name: "up", Version: "1", Filename: up.Filename, SHA256: up.SHA256, Size: up.Size}}}
		switch {
		case strings.HasPrefix(up.Filename, "deny"):
			r.State, r.Decision, r.Reasons = broker.StateRejected, "rejected", []string{"reading metadata: open " + up.Path + ": denylisted"}
		case strings.HasPrefix(up.Filename, "boom"):
			return broker.Request{}, errors.New("open " + up.Path + ": classifier exploded")
		}
		return r, nil
	}
	r := broker.Request{State: broker.StateApproved, Decision: "auto-approved", Reasons: []string{"all allowlisted"}}
	for _, sp := range specs {
		r.Packages = append(r.Packages, broker.Pkg{Name: strings.FieldsFunc(sp, func(c rune) bool { return strings.ContainsRune("<>=!~;[ ", c) })[0], Version: "1.0"})
	}
	switch {
	case strings.HasPrefix(specs[0], "deny"):
		r.State, r.Decision, r.Reasons = broker.StateRejected, "rejected", []string{"denylisted"}
	case strings.HasPrefix(specs[0], "pend"):
		r.State, r.Decision, r.Reasons = broker.StatePending, "pending", []string{"not on the allowlist"}
	case strings.HasPrefix(specs[0], "iso"):
		r.State, r.Decision, r.Isolated = broker.StatePending, "pending", true
	case strings.HasPrefix(specs[0], "boom") && !f.noFail:
		return broker.Request{}, io.ErrUnexpectedEOF
	case strings.HasPrefix(specs[0], "slow"):
		time.Sleep(f.slow) // the broker's own work, which the client's timeouts must not cut
	}
	return r, nil
}

type fakeBuilder struct {
	mu  sync.Mutex
	ids []string
}

func (b *fakeBuilder) Enqueue(ctx context.Context, id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ids = append(b.ids, id)
}

func (b *fakeBuilder) enqueued() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.ids...)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is a running broker with an admin, owners alice and bob, and one session each.
type env struct {
	t       testing.TB
	store   *sqlite.Store
	srv     *broker.Server
	ts      *httptest.Server
	builder *fakeBuilder
	logs    *syncBuffer
	secrets []string
	admin   string
	alice   string
	bob     string
	sesA    string // alice's session
	agentA  string
	sesB    string // bob's session
	agentB  string
	dataDir string
}

func newEnv(t testing.TB, mod func(*broker.Options)) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "broker.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{t: t, store: st, builder: &fakeBuilder{}, logs: &syncBuffer{}, dataDir: filepath.Join(dir, "data")}
	o := broker.Options{Store: st, Builder: e.builder, Classifier: fakeClassifier{}, DataDir: e.dataDir,
		Logger: slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if mod != nil {
		mod(&o)
	}
	e.srv, err = broker.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.srv.Close) // before the store closes
	e.ts = httptest.NewUnstartedServer(e.srv)
	e.ts.Config = e.srv.HTTPServer() // the production limits
	e.ts.Listener = broker.LimitListener(e.ts.Listener, o.HTTP.MaxConns)
	e.ts.Start()
	t.Cleanup(e.ts.Close)
	mint := func(role, subject string) string {
		s, err := e.srv.CreateToken(ctx, role, subject)
		if err != nil {
			t.Fatal(err)
		}
		e.secrets = append(e.secrets, s)
		return s
	}
	e.admin, e.alice, e.bob = mint(broker.RoleAdmin, "root"), mint(broker.RoleOwner, "alice"), mint(broker.RoleOwner, "bob")
	e.sesA, e.agentA = e.newSession(e.alice)
	e.sesB, e.agentB = e.newSession(e.bob)
	return e
}

func (e *env) newSession(owner string) (id, agent string) {
	var cs broker.CreatedSession
	e.mustDo("POST", "/v1/sessions", owner, "application/json", `{}`, http.StatusCreated, &cs)
	e.secrets = append(e.secrets, cs.AgentToken)
	return cs.Session.ID, cs.AgentToken
}

// do sends a request and returns the status, headers and body.
func (e *env) do(method, path, token, ctype, body string) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func (e *env) mustDo(method, path, token, ctype, body string, want int, out any) {
	e.t.Helper()
	code, _, b := e.do(method, path, token, ctype, body)
	if code != want {
		e.t.Fatalf("%s %s: %d %s, want %d", method, path, code, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: decoding %s: %v", method, path, b, err)
		}
	}
}

// auditOf lists the actions of the audit events of session about request id, in order,
// each with "/" and its decision when decisions is set.
func (e *env) auditOf(session, id string, decisions bool) []string {
	e.t.Helper()
	l, err := e.store.AuditLog(context.Background(), session)
	if err != nil {
		e.t.Fatal(err)
	}
	var actions []string
	for _, ev := range l {
		if ev.RequestID == id {
			a := ev.Action
			if decisions {
				a += "/" + ev.Decision
			}
			actions = append(actions, a)
		}
	}
	return actions
}

func (e *env) request(token, session, specs string) broker.Request {
	e.t.Helper()
	var r broker.Request
	e.mustDo("POST", "/v1/sessions/"+session+"/requests", token, "application/json", `{"packages": [`+specs+`]}`, http.StatusCreated, &r)
	return r
}

// state is everything the store holds, to prove that a refused call changed nothing.
type state struct {
	Sessions []broker.Session
	Requests []broker.Request
	Bindings map[string][]broker.Binding
	Audit    []broker.AuditEvent
	Tokens   int
	Uploads  []string
}

func (e *env) snapshot() state {
	e.t.Helper()
	ctx := context.Background()
	var s state
	var err error
	if s.Sessions, err = e.store.ListSessions(ctx, ""); err != nil {
		e.t.Fatal(err)
	}
	if s.Requests, err = e.store.ListRequests(ctx, broker.RequestFilter{}); err != nil {
		e.t.Fatal(err)
	}
	s.Bindings = map[string][]broker.Binding{}
	for _, se := range s.Sessions {
		if s.Bindings[se.ID], err = e.store.Bindings(ctx, se.ID); err != nil {
			e.t.Fatal(err)
		}
	}
	if s.Audit, err = e.store.AuditLog(ctx, ""); err != nil {
		e.t.Fatal(err)
	}
	if err := e.store.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM tokens`).Scan(&s.Tokens); err != nil {
		e.t.Fatal(err)
	}
	s.Uploads = e.uploads()
	return s
}

// uploads lists every file under the data dir, relative to it.
func (e *env) uploads() []string {
	e.t.Helper()
	var files []string
	err := filepath.WalkDir(e.dataDir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(e.dataDir, p)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return files
}

func (e *env) unchanged(what string, before state) {
	e.t.Helper()
	if after := e.snapshot(); !reflect.DeepEqual(before, after) {
		e.t.Errorf("%s changed the store:\nbefore %+v\nafter  %+v", what, before, after)
	}
}
