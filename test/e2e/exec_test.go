package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// exBroker is a pylayer serve that runs warm sessions (broker/executor) in real bwrap,
// on the host's python3 (sessions of a broker without a repository are degraded).
type exBroker struct {
	url, owner string
	stderr     *syncBuf
}

func startExBroker(ctx context.Context, t *testing.T, extra ...string) *exBroker {
	t.Helper()
	h := newHost(t)
	db := filepath.Join(h.home, "broker", "broker.db")
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	b := &exBroker{owner: h.must(ctx, t, "token", "create", "--db", db, "--role", "owner", "--subject", "alice"), stderr: &syncBuf{}}
	cmd := h.command(context.Background(), t, append([]string{"serve", "--listen", "127.0.0.1:0", "--db", db}, extra...)...)
	cmd.Stderr = b.stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pylayer serve stderr:\n%s", b.stderr)
		}
	})
	_, b.url = startServer(t, cmd, 15*time.Second)
	return b
}

// do sends a request; body is nil, []byte (raw) or a value sent as JSON.
func (b *exBroker) do(t *testing.T, method, p, token string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	ctype := ""
	switch v := body.(type) {
	case nil:
	case []byte:
		rd, ctype = bytes.NewReader(v), "application/octet-stream"
	default:
		j, _ := json.Marshal(v)
		rd, ctype = bytes.NewReader(j), "application/json"
	}
	req, err := http.NewRequest(method, b.url+p, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

type exSession struct{ id, agent string }

func (b *exBroker) session(t *testing.T) exSession {
	t.Helper()
	code, body := b.do(t, "POST", "/v1/sessions", b.owner, map[string]any{})
	var r struct {
		Session    struct{ ID string } `json:"session"`
		AgentToken string              `json:"agent_token"`
	}
	if code != 201 || json.Unmarshal(body, &r) != nil || r.Session.ID == "" {
		t.Fatalf("creating a session: %d %s", code, body)
	}
	return exSession{r.Session.ID, r.AgentToken}
}

type exResult struct {
	RunID   string `json:"run_id"`
	Status  string `json:"status"`
	Stdout  string `json:"stdout"`
	Stderr  string `json:"stderr"`
	Outputs []struct {
		MIME string `json:"mime"`
		Data string `json:"data"`
	} `json:"outputs"`
	Error *struct {
		EName string `json:"ename"`
	} `json:"error"`
	Restarted     bool   `json:"restarted"`
	RestartReason string `json:"restart_reason"`
}

func (b *exBroker) exec(t *testing.T, s exSession, code string, timeout float64) exResult {
	t.Helper()
	st, body := b.do(t, "POST", "/v1/sessions/"+s.id+"/exec", s.agent, map[string]any{"code": code, "timeout": timeout})
	var r exResult
	if st != 200 || json.Unmarshal(body, &r) != nil {
		t.Fatalf("exec %q: %d %s", code, st, body)
	}
	return r
}

// TestExecWarmSessions: state kept across calls and across a timeout, a crashed process
// restarted, files in and out, escapes refused, another session's token refused, the
// host cap evicting the longest idle.
func TestExecWarmSessions(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b := startExBroker(ctx, t, "--exec-max-live", "2")
	a := b.session(t)

	if r := b.exec(t, a, "x = 41", 0); r.Status != "ok" {
		t.Fatalf("first call: %+v", r)
	}
	if r := b.exec(t, a, "print(x + 1)", 0); r.Status != "ok" || r.Stdout != "42\n" || r.Restarted {
		t.Fatalf("state across calls: %+v", r)
	}
	if r := b.exec(t, a, "import time\ntime.sleep(60)", 0.5); r.Status != "timeout" || r.Restarted {
		t.Fatalf("a timeout: %+v", r)
	}
	if r := b.exec(t, a, "print(x)", 0); r.Stdout != "41\n" {
		t.Fatalf("state after a timeout: %+v", r)
	}
	if r := b.exec(t, a, "import os\nos._exit(3)", 0); r.Status != "error" || !r.Restarted || !strings.Contains(r.RestartReason, "crashed") {
		t.Fatalf("a crash: %+v", r)
	}
	if r := b.exec(t, a, "print('x' in globals())", 0); r.Status != "ok" || r.Stdout != "False\n" {
		t.Fatalf("after the restart: %+v", r)
	}

	// files in and out
	if st, body := b.do(t, "PUT", "/v1/sessions/"+a.id+"/files/in/data.txt", a.agent, []byte("hello")); st != 200 {
		t.Fatalf("PUT: %d %s", st, body)
	}
	if r := b.exec(t, a, "open('/workspace/out.txt', 'w').write(open('/workspace/in/data.txt').read().upper())", 0); r.Status != "ok" {
		t.Fatalf("using the file: %+v", r)
	}
	if st, body := b.do(t, "GET", "/v1/sessions/"+a.id+"/files/out.txt", a.agent, nil); st != 200 || string(body) != "HELLO" {
		t.Fatalf("GET out.txt: %d %q", st, body)
	}
	st, body := b.do(t, "GET", "/v1/sessions/"+a.id+"/files?dir=", a.agent, nil)
	if st != 200 || !strings.Contains(string(body), `"out.txt"`) || !strings.Contains(string(body), `"in"`) {
		t.Fatalf("listing: %d %s", st, body)
	}

	// escapes: a link the session made to /, a path with ..
	if r := b.exec(t, a, "import os\nos.symlink('/', '/workspace/x')\nos.symlink('/etc/passwd', '/workspace/pw')", 0); r.Status != "ok" {
		t.Fatalf("making links: %+v", r)
	}
	for _, p := range []string{"x/etc/passwd", "pw", "in/../../../etc/passwd", "x/etc"} {
		if st, body := b.do(t, "GET", "/v1/sessions/"+a.id+"/files/"+p, a.agent, nil); st == 200 || strings.Contains(string(body), "root:") {
			t.Errorf("GET %s: %d %q", p, st, body)
		}
	}
	if st, _ := b.do(t, "PUT", "/v1/sessions/"+a.id+"/files/x/tmp/pwned", a.agent, []byte("x")); st == 200 {
		t.Error("PUT through a link to / succeeded")
	}

	// another session's agent token
	other := b.session(t)
	if st, body := b.do(t, "POST", "/v1/sessions/"+a.id+"/exec", other.agent, map[string]any{"code": "print(1)"}); st == 200 {
		t.Errorf("exec with another session's token: %d %s", st, body)
	}
	if st, _ := b.do(t, "GET", "/v1/sessions/"+a.id+"/files/out.txt", other.agent, nil); st == 200 {
		t.Error("GET with another session's token succeeded")
	}

	// the host cap (2): a and other warm, a third session stops the longest idle, a
	b.exec(t, a, "y = 1", 0)
	b.exec(t, other, "z = 1", 0)
	third := b.session(t)
	if r := b.exec(t, third, "print(1)", 0); r.Status != "ok" {
		t.Fatalf("a third session: %+v", r)
	}
	if r := b.exec(t, other, "print(z)", 0); r.Stdout != "1\n" || r.Restarted {
		t.Fatalf("the session used last keeps its process: %+v", r)
	}
	if r := b.exec(t, a, "print('y' in globals())", 0); r.Stdout != "False\n" || !r.Restarted || !strings.Contains(r.RestartReason, "make room") {
		t.Fatalf("the longest idle was evicted: %+v", r)
	}
	// state kept on disk across restarts: the workspace is the session's
	if r := b.exec(t, a, "print(open('/workspace/out.txt').read())", 0); r.Stdout != "HELLO\n" {
		t.Fatalf("the workspace after an eviction: %+v", r)
	}
}

// TestExecIdleEviction: a process idle past --exec-idle is stopped, and the next call
// says its state was lost.
func TestExecIdleEviction(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b := startExBroker(ctx, t, "--exec-idle", "1s")
	s := b.session(t)
	b.exec(t, s, "x = 1", 0)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(b.stderr.String(), "stopped after 1s idle") {
		if time.Now().After(deadline) {
			t.Fatal("the idle process was not stopped within a minute")
		}
		time.Sleep(50 * time.Millisecond) // polling the log for the condition
	}
	if r := b.exec(t, s, "print('x' in globals())", 0); r.Stdout != "False\n" || !r.Restarted || !strings.Contains(r.RestartReason, "idle") {
		t.Fatalf("after an idle eviction: %+v", r)
	}
}
