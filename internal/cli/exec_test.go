//go:build !lean

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/pylayer/pylayer/broker"
)

// fakeWarmBroker answers exec and shell for session ses_1 with token pyl_good: an exec's
// code "raise" fails with a traceback, "slow" times out, "busy" is 409; anything else
// prints the code, writes "warn" to stderr and shows a PNG of 8 bytes. A shell command
// exits with the number it is given ("exit 3"). It records what it was sent.
type fakeWarmBroker struct {
	mu    sync.Mutex
	auths []string
	codes []broker.ExecRequest
}

func (f *fakeWarmBroker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.auths = append(f.auths, r.Header.Get("Authorization"))
	f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer pyl_good" {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error": "unknown token"}`))
		return
	}
	switch r.URL.Path {
	case "/v1/sessions/ses_1/exec":
		var req broker.ExecRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.codes = append(f.codes, req)
		f.mu.Unlock()
		res := broker.ExecResult{RunID: "run_1", Status: broker.RunOK, Stdout: req.Code, Stderr: "warn\n", Outputs: []broker.Output{{MIME: "image/png", Data: "iVBORw0KGgo="}}}
		switch req.Code {
		case "busy":
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error": "another call of session ses_1 is running (run run_0)"}`))
			return
		case "raise":
			res = broker.ExecResult{RunID: "run_1", Status: broker.RunError, Outputs: []broker.Output{},
				Error: &broker.ExecError{EName: "ZeroDivisionError", EValue: "division by zero", Traceback: []string{"Traceback (most recent call last):", "ZeroDivisionError: division by zero"}}}
		case "slow":
			res = broker.ExecResult{RunID: "run_1", Status: broker.RunTimeout, Outputs: []broker.Output{}}
		}
		if r.Header.Get("Accept") != broker.NDJSON {
			_ = json.NewEncoder(w).Encode(res)
			return
		}
		w.Header().Set("Content-Type", broker.NDJSON)
		enc := json.NewEncoder(w)
		_ = enc.Encode(broker.ExecEvent{Type: broker.EventStart, RunID: "run_1"})
		if res.Status == broker.RunOK {
			_ = enc.Encode(broker.ExecEvent{Type: broker.EventStream, RunID: "run_1", Name: "stdout", Text: res.Stdout})
			_ = enc.Encode(broker.ExecEvent{Type: broker.EventStream, RunID: "run_1", Name: "stderr", Text: res.Stderr})
			_ = enc.Encode(broker.ExecEvent{Type: broker.EventDisplay, RunID: "run_1", MIME: "image/png", Data: res.Outputs[0].Data})
		}
		_ = enc.Encode(broker.ExecEvent{Type: broker.EventResult, RunID: "run_1", Result: &res})
	case "/v1/sessions/ses_1/shell":
		var req broker.ShellRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		res := broker.ShellResult{RunID: "run_2", Status: broker.RunOK, Stdout: "ran " + req.Command + "\n"}
		if n, ok := strings.CutPrefix(req.Command, "exit "); ok {
			res.Status, res.Stderr = broker.RunError, "failing\n"
			_ = json.Unmarshal([]byte(n), &res.ExitCode)
		}
		_ = json.NewEncoder(w).Encode(res)
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error": "no such session"}`))
	}
}

// warm runs pylayer with stdin against a fake broker.
func warm(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := New()
	var o, se bytes.Buffer
	cmd.SetOut(&o)
	cmd.SetErr(&se)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	err = cmd.ExecuteContext(context.Background())
	return o.String(), se.String(), err
}

func TestExecCommand(t *testing.T) {
	newEnv(t)
	fb := &fakeWarmBroker{}
	srv := httptest.NewServer(fb)
	t.Cleanup(srv.Close)
	t.Setenv("PYLAYER_TOKEN", "pyl_good")
	t.Setenv("PYLAYER_BROKER", srv.URL)

	out, errs, err := warm(t, "", "exec", "--session", "ses_1", "--timeout", "5s", "--", "print(1)")
	if err != nil || out != "print(1)[image/png: 8 bytes]\n" || errs != "warn\n" {
		t.Errorf("exec = %q %q %v", out, errs, err)
	}
	if got := fb.codes[len(fb.codes)-1]; got.Timeout != 5 || got.Reset {
		t.Errorf("exec sent %+v", got)
	}
	// Code from stdin, with --reset.
	if _, _, err := warm(t, "x = 2\n", "exec", "--session", "ses_1", "--reset", "--", "-"); err != nil {
		t.Fatal(err)
	}
	if got := fb.codes[len(fb.codes)-1]; got.Code != "x = 2\n" || !got.Reset || got.Timeout != broker.DefaultExecTimeout {
		t.Errorf("exec - sent %+v", got)
	}
	// An exception: its traceback on stderr, exit 1; a timeout exits 124.
	out, errs, err = warm(t, "", "exec", "--session", "ses_1", "--", "raise")
	var code ExitCode
	if !errors.As(err, &code) || code != 1 || out != "" || !strings.Contains(errs, "ZeroDivisionError: division by zero\n") || !strings.HasPrefix(errs, "Traceback") {
		t.Errorf("raise = %q %q %v", out, errs, err)
	}
	_, errs, err = warm(t, "", "exec", "--session", "ses_1", "--", "slow")
	if !errors.As(err, &code) || code != 124 || !strings.Contains(errs, "timed out") {
		t.Errorf("slow = %q %v", errs, err)
	}
	// --json prints the whole result, outputs included, and keeps the exit status.
	out, _, err = warm(t, "", "--json", "exec", "--session", "ses_1", "--", "raise")
	var res broker.ExecResult
	if jerr := json.Unmarshal([]byte(out), &res); jerr != nil || res.Error == nil || res.Error.EName != "ZeroDivisionError" || !errors.As(err, &code) || code != 1 {
		t.Errorf("--json raise = %q %v %v", out, err, jerr)
	}
	checkSnakeCase(t, "exec --json", out)
	out, _, err = warm(t, "", "--json", "exec", "--session", "ses_1", "--", "show()")
	if jerr := json.Unmarshal([]byte(out), &res); jerr != nil || err != nil || len(res.Outputs) != 1 || res.Outputs[0].Data != "iVBORw0KGgo=" {
		t.Errorf("--json show = %q %v %v", out, err, jerr)
	}
	// The broker's refusal is an error that says why.
	if _, _, err := warm(t, "", "exec", "--session", "ses_1", "--", "busy"); err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "run_0") {
		t.Errorf("busy: %v", err)
	}
	for _, a := range fb.auths {
		if a != "Bearer pyl_good" {
			t.Errorf("sent Authorization %q", a)
		}
	}
}

func TestShellCommand(t *testing.T) {
	newEnv(t)
	srv := httptest.NewServer(&fakeWarmBroker{})
	t.Cleanup(srv.Close)
	t.Setenv("PYLAYER_TOKEN", "pyl_good")
	out, errs, err := warm(t, "", "shell", "--session", "ses_1", "--broker", srv.URL, "--", "ls", "-l")
	if err != nil || out != "ran ls -l\n" || errs != "" {
		t.Errorf("shell = %q %q %v", out, errs, err)
	}
	out, errs, err = warm(t, "", "shell", "--session", "ses_1", "--broker", srv.URL, "--", "exit 3")
	var code ExitCode
	if !errors.As(err, &code) || code != 3 || errs != "failing\n" || out != "ran exit 3\n" {
		t.Errorf("exit 3 = %q %q %v", out, errs, err)
	}
	out, _, err = warm(t, "", "--json", "shell", "--session", "ses_1", "--broker", srv.URL, "--", "exit 4")
	var res broker.ShellResult
	if jerr := json.Unmarshal([]byte(out), &res); jerr != nil || res.ExitCode != 4 || !errors.As(err, &code) || code != 4 {
		t.Errorf("--json exit 4 = %q %v %v", out, err, jerr)
	}
	checkSnakeCase(t, "shell --json", out)
}

func TestWarmCommandErrors(t *testing.T) {
	newEnv(t)
	srv := httptest.NewServer(&fakeWarmBroker{})
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		name, token string
		args        []string
		has         string
	}{
		{"no token", "", []string{"exec", "--session", "ses_1", "--broker", srv.URL, "--", "1"}, "$PYLAYER_TOKEN"},
		{"bad token", "pyl_bad", []string{"exec", "--session", "ses_1", "--broker", srv.URL, "--", "1"}, "401"},
		{"no session", "pyl_good", []string{"exec", "--broker", srv.URL, "--", "1"}, "--session is required"},
		{"no broker", "pyl_good", []string{"shell", "--session", "ses_1", "--", "ls"}, "--broker"},
		{"timeout", "pyl_good", []string{"exec", "--session", "ses_1", "--broker", srv.URL, "--timeout", "11m", "--", "1"}, "at most 600s"},
		{"other session", "pyl_good", []string{"shell", "--session", "ses_2", "--broker", srv.URL, "--", "ls"}, "no such session"},
		{"token flag", "pyl_good", []string{"exec", "--session", "ses_1", "--token", "pyl_good", "--", "1"}, "unknown flag"},
	} {
		t.Setenv("PYLAYER_TOKEN", c.token)
		if _, _, err := warm(t, "", c.args...); err == nil || !strings.Contains(err.Error(), c.has) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.has)
		}
	}
}
