package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestExecRemoteHost: two pylayer serve processes on loopback, the broker (--db, running
// no sessions itself) and a sandbox host (--broker URL, its own cache and --sessions-dir,
// no database). An agent execs on the sandbox host, keeping state; another session's
// token is refused there; a rebind on the broker (the agent asks for an ext layer) restarts
// the process on the sandbox host, within the grant TTL, with the new layer visible.
func TestExecRemoteHost(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d := newBkDeploy(ctx, t, false)
	d.serve.stop(10 * time.Second)
	brokerCmd := d.h.command(context.Background(), t, "serve", "--listen", "127.0.0.1:0", "--db", d.db, "--catalog", d.catalog,
		"--repo", d.repo, "--key", d.priv, "--index-url", d.proxy.URL, "--exec-max-live", "0")
	brokerErr := &syncBuf{}
	brokerCmd.Stderr = brokerErr
	_, brokerURL := startServer(t, brokerCmd, 15*time.Second)
	d.serve = &bkServe{URL: brokerURL}

	sh := newHost(t) // another cache, another home: nothing shared with the broker but the repository
	hostCmd := sh.command(context.Background(), t, "serve", "--listen", "127.0.0.1:0", "--broker", brokerURL,
		"--repo", d.repo, "--trust", d.pub, "--sessions-dir", sh.home+"/sessions")
	b := &exBroker{owner: d.owner, stderr: &syncBuf{}}
	hostCmd.Stderr = b.stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("broker stderr:\n%s\nsandbox host stderr:\n%s", brokerErr, b.stderr)
		}
	})
	_, b.url = startServer(t, hostCmd, 15*time.Second)

	// sessions are made on the broker; the sandbox host has no such route
	broker := &exBroker{url: brokerURL, owner: d.owner}
	s, other := broker.session(t), broker.session(t)
	if code, body := b.do(t, "POST", "/v1/sessions", d.owner, map[string]any{}); code != 404 {
		t.Errorf("POST /v1/sessions on the sandbox host: %d %s, want 404", code, body)
	}
	if code, body := broker.do(t, "POST", "/v1/sessions/"+s.id+"/exec", s.agent, map[string]any{"code": "1"}); code != 501 {
		t.Errorf("exec on the broker that runs no sessions: %d %s, want 501", code, body)
	}

	if r := b.exec(t, s, "import pin\nkept = 1\ntry:\n    import foo\nexcept ImportError as e:\n    print('no foo:', e.name)", 120); r.Status != "ok" || !strings.Contains(r.Stdout, "no foo: foo") {
		t.Fatalf("the first call on the sandbox host: %+v", r)
	}
	if r := b.exec(t, s, "print(kept)", 60); r.Status != "ok" || r.Stdout != "1\n" || r.Restarted {
		t.Fatalf("state across calls on the sandbox host: %+v", r)
	}
	for _, c := range []struct {
		who, token string
		code       int
	}{
		{"another session's agent", other.agent, 403},
		{"bob, another owner", d.owner2, 403},
		{"an unknown token", "pyl_nosuchtoken", 401},
	} {
		if code, body := b.do(t, "POST", "/v1/sessions/"+s.id+"/exec", c.token, map[string]any{"code": "print(kept)"}); code != c.code {
			t.Errorf("%s on the sandbox host: %d %s, want %d", c.who, code, body, c.code)
		}
	}
	if code, body := b.do(t, "GET", "/v1/sessions/"+s.id+"/runs", d.owner, nil); code != 200 || strings.Count(string(body), `"run_id"`) != 2 {
		t.Errorf("the owner's view of the runs on the sandbox host: %d %s", code, body)
	}

	req := d.serve.ask(t, bkSession{ID: s.id, Agent: s.agent}, "foo==1.0")
	if got := d.serve.wait(t, s.agent, req.ID); got.State != "bound" {
		t.Fatalf("the request for foo ended %s: %s", got.State, got.reasons())
	}
	// The sandbox host keeps the broker's yes for up to --grant-ttl (2s): the rebind shows
	// on the first call after it.
	probe := "try:\n    import foo\n    print(foo.__file__)\nexcept ImportError:\n    print('none')\nprint('kept' in globals())"
	var r exResult
	for deadline := time.Now().Add(30 * time.Second); ; {
		r = b.exec(t, s, probe, 120)
		if r.Restarted || time.Now().After(deadline) {
			break
		}
	}
	if r.Status != "ok" || !r.Restarted || !strings.Contains(r.RestartReason, "bindings changed") {
		t.Fatalf("after the binding: %+v, want a restart that says the bindings changed", r)
	}
	lines := strings.Fields(r.Stdout)
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "/opt/pylayer/layers/") || !strings.Contains(lines[0], "ext") || lines[1] != "False" {
		t.Errorf("after the restart: %q; want foo from the ext layer and a fresh process", r.Stdout)
	}
	// no audit store on the sandbox host: its log line is the record, never the code
	if log := b.stderr.String(); !strings.Contains(log, "code_sha256") || strings.Contains(log, "no foo:") {
		t.Errorf("the sandbox host's run log: want code_sha256 and no output")
	}
}
