package broker_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// fakeExecutor runs "code" by its first word: busy, unavailable, invalid and boom fail
// (boom with a host path in its error); block waits for a cancel (or its ctx); step
// emits a line and waits for next before it goes on; slow takes slowFor between two lines.
// Anything else prints the code and displays a PNG. Files live in memory, capped at maxFile.
type fakeExecutor struct {
	maxFile int64
	slowFor time.Duration
	next    chan struct{} // step's go-ahead

	mu       sync.Mutex
	n        int
	sessions map[string]string        // run -> session
	cancels  map[string]chan struct{} // running blocked runs
	runs     []broker.RunInfo
	files    map[string][]byte // session/path -> bytes
	calls    []string          // session:kind of every call that reached the executor
	started  chan string       // block's run ids, as they start
}

var _ broker.Executor = (*fakeExecutor)(nil)

func newFakeExecutor() *fakeExecutor {
	return &fakeExecutor{maxFile: 1 << 10, next: make(chan struct{}), sessions: map[string]string{},
		cancels: map[string]chan struct{}{}, files: map[string][]byte{}, started: make(chan string, 8)}
}

func (f *fakeExecutor) begin(s broker.Session, kind, summary string) (string, chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	id := fmt.Sprintf("run%d", f.n)
	f.sessions[id] = s.ID
	f.calls = append(f.calls, s.ID+":"+kind)
	c := make(chan struct{})
	f.cancels[id] = c
	f.runs = append([]broker.RunInfo{{RunID: id, SessionID: s.ID, Kind: kind, Status: "running", Started: time.Unix(1700000000, 0).UTC(), Summary: summary}}, f.runs...)
	return id, c
}

func (f *fakeExecutor) end(id, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.cancels, id)
	for i := range f.runs {
		if f.runs[i].RunID == id {
			f.runs[i].Status = status
		}
	}
}

func (f *fakeExecutor) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeExecutor) fail(code string) error {
	switch strings.Fields(code + " x")[0] {
	case "busy":
		return fmt.Errorf("exec: %w", broker.ErrBusy)
	case "unavailable":
		return fmt.Errorf("starting the interpreter: %w: 8 live sessions, all busy", broker.ErrUnavailable)
	case "invalid":
		return fmt.Errorf("%w: the session has no base", broker.ErrInvalid)
	case "boom":
		return errors.New("open /var/lib/pylayer/sessions/secret/kernel.sock: connection refused")
	}
	return nil
}

func (f *fakeExecutor) Exec(ctx context.Context, s broker.Session, req broker.ExecRequest, emit func(broker.ExecEvent)) (broker.ExecResult, error) {
	if emit == nil {
		emit = func(broker.ExecEvent) {}
	}
	id, cancel := f.begin(s, broker.RunKindExec, req.Code)
	res := broker.ExecResult{RunID: id, Status: broker.RunOK}
	defer func() { f.end(id, res.Status) }()
	if err := f.fail(req.Code); err != nil {
		return broker.ExecResult{}, err
	}
	emit(broker.ExecEvent{Type: broker.EventStart, RunID: id})
	switch word := strings.Fields(req.Code + " x")[0]; word {
	case "block":
		f.started <- id
		select {
		case <-cancel:
		case <-ctx.Done():
		}
		res.Status = broker.RunCancelled
		return res, nil
	case "step":
		emit(broker.ExecEvent{Type: broker.EventStream, RunID: id, Name: "stdout", Text: "one\n"})
		<-f.next
		emit(broker.ExecEvent{Type: broker.EventStream, RunID: id, Name: "stdout", Text: "two\n"})
		res.Stdout = "one\ntwo\n"
	case "slow":
		emit(broker.ExecEvent{Type: broker.EventStream, RunID: id, Name: "stdout", Text: "before\n"})
		time.Sleep(f.slowFor) // a cell that computes for a while, longer than the write timeout
		emit(broker.ExecEvent{Type: broker.EventStream, RunID: id, Name: "stdout", Text: "after\n"})
		res.Stdout = "before\nafter\n"
	case "midfail":
		emit(broker.ExecEvent{Type: broker.EventStream, RunID: id, Name: "stdout", Text: "partial\n"})
		return broker.ExecResult{RunID: id}, errors.New("the pipe to /run/kernel broke")
	case "raise":
		res.Status = broker.RunError
		res.Error = &broker.ExecError{EName: "ValueError", EValue: "bad", Traceback: []string{"Traceback (most recent call last):", "ValueError: bad"}}
	default:
		emit(broker.ExecEvent{Type: broker.EventStream, RunID: id, Name: "stdout", Text: req.Code})
		emit(broker.ExecEvent{Type: broker.EventDisplay, RunID: id, MIME: "image/png", Data: "iVBORw0KGgo="})
		res.Stdout = req.Code
		res.Outputs = []broker.Output{{MIME: "image/png", Data: "iVBORw0KGgo="}}
		res.DurationMS = int64(req.Timeout) // what the handler passed, for the test to see
	}
	done := res
	emit(broker.ExecEvent{Type: broker.EventResult, RunID: id, Result: &done}) // the server must not send it twice
	return res, nil
}

func (f *fakeExecutor) Shell(ctx context.Context, s broker.Session, req broker.ShellRequest) (broker.ShellResult, error) {
	id, cancel := f.begin(s, broker.RunKindShell, req.Command)
	status := broker.RunOK
	defer func() { f.end(id, status) }()
	if err := f.fail(req.Command); err != nil {
		return broker.ShellResult{}, err
	}
	if req.Command == "block" {
		f.started <- id
		select {
		case <-cancel:
		case <-ctx.Done():
		}
		status = broker.RunCancelled
		return broker.ShellResult{RunID: id, Status: status, ExitCode: -1}, nil
	}
	return broker.ShellResult{RunID: id, Status: broker.RunOK, Stdout: "ran " + req.Command + "\n"}, nil
}

func (f *fakeExecutor) Cancel(ctx context.Context, runID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.cancels[runID]
	if !ok {
		return fmt.Errorf("run %s: %w: it has ended", runID, broker.ErrNotFound)
	}
	close(c)
	delete(f.cancels, runID)
	return nil
}

func (f *fakeExecutor) RunSession(runID string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sessions[runID]
	return s, ok
}

func (f *fakeExecutor) Runs(sessionID string, limit int) []broker.RunInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	var l []broker.RunInfo // as broker/executor's: the run under way first, then the ended ones
	for _, running := range []bool{true, false} {
		for _, r := range f.runs {
			if r.SessionID == sessionID && len(l) < limit && (r.Status == broker.RunRunning) == running {
				l = append(l, r)
			}
		}
	}
	return l
}

func (f *fakeExecutor) PutFile(ctx context.Context, s broker.Session, p string, body io.Reader) (broker.FileInfo, error) {
	b, err := io.ReadAll(io.LimitReader(body, f.maxFile+1))
	if err != nil {
		return broker.FileInfo{}, err
	}
	if int64(len(b)) > f.maxFile {
		return broker.FileInfo{}, fmt.Errorf("writing %s: %w: the cap is %d bytes", p, broker.ErrTooLarge, f.maxFile)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[s.ID+"/"+p] = b
	f.calls = append(f.calls, s.ID+":put")
	return broker.FileInfo{Name: path.Base(p), Path: p, Size: int64(len(b)), Type: broker.FileRegular, MTime: time.Unix(1700000000, 0).UTC()}, nil
}

func (f *fakeExecutor) OpenFile(ctx context.Context, s broker.Session, p string) (io.ReadCloser, broker.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.files[s.ID+"/"+p]
	if !ok {
		return nil, broker.FileInfo{}, fmt.Errorf("open %s: %w", p, broker.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), broker.FileInfo{Name: path.Base(p), Path: p, Size: int64(len(b)), Type: broker.FileRegular}, nil
}

func (f *fakeExecutor) ListFiles(ctx context.Context, s broker.Session, dir string) ([]broker.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var l []broker.FileInfo
	for k, b := range f.files {
		if p, ok := strings.CutPrefix(k, s.ID+"/"); ok && (dir == "." || path.Dir(p) == dir) {
			l = append(l, broker.FileInfo{Name: path.Base(p), Path: p, Size: int64(len(b)), Type: broker.FileRegular})
		}
	}
	sort.Slice(l, func(i, j int) bool { return l[i].Path < l[j].Path })
	return l, nil
}

func (f *fakeExecutor) DeleteFile(ctx context.Context, s broker.Session, p string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.files[s.ID+"/"+p]; !ok {
		return fmt.Errorf("removing %s: %w", p, broker.ErrNotFound)
	}
	delete(f.files, s.ID+"/"+p)
	return nil
}

// execEnv is an env whose broker runs sessions with a fake executor.
func execEnv(t *testing.T, mod func(*broker.Options)) (*env, *fakeExecutor) {
	t.Helper()
	fx := newFakeExecutor()
	e := newEnv(t, func(o *broker.Options) {
		o.Executor = fx
		if mod != nil {
			mod(o)
		}
	})
	return e, fx
}

// send is e.do with headers.
func (e *env) send(method, path, token string, body io.Reader, hdr ...string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestExecutorRoutesAuth: every route, for each kind of token, on the token's own
// session and another's; a refused call never reaches the executor.
func TestExecutorRoutesAuth(t *testing.T) {
	e, fx := execEnv(t, nil)
	fx.files[e.sesA+"/a.txt"], fx.files[e.sesB+"/a.txt"] = []byte("a"), []byte("b")
	type call struct{ method, path, ctype, body string }
	calls := func(ses string) []call {
		return []call{
			{"POST", "/v1/sessions/" + ses + "/exec", "application/json", `{"code": "print(1)"}`},
			{"POST", "/v1/sessions/" + ses + "/shell", "application/json", `{"command": "ls"}`},
			{"GET", "/v1/sessions/" + ses + "/runs", "", ""},
			{"GET", "/v1/sessions/" + ses + "/files?dir=.", "", ""},
			{"PUT", "/v1/sessions/" + ses + "/files/b.txt", "application/octet-stream", "bytes"},
			{"GET", "/v1/sessions/" + ses + "/files/a.txt", "", ""},
			{"DELETE", "/v1/sessions/" + ses + "/files/b.txt", "", ""},
		}
	}
	for _, c := range []struct {
		who, token, ses string
		want            int // 0: 2xx
	}{
		{"agent A on A", e.agentA, e.sesA, 0},
		{"agent A on B", e.agentA, e.sesB, 403},
		{"agent A on none", e.agentA, "nosuch", 403},
		{"alice on A", e.alice, e.sesA, 0},
		{"alice on B", e.alice, e.sesB, 403},
		{"alice on none", e.alice, "nosuch", 404},
		{"admin on B", e.admin, e.sesB, 0},
		{"admin on none", e.admin, "nosuch", 404},
		{"no token", "", e.sesA, 401},
	} {
		before := len(fx.called())
		for _, k := range calls(c.ses) {
			code, _, b := e.do(k.method, k.path, c.token, k.ctype, k.body)
			if c.want == 0 && (code < 200 || code > 299) || c.want != 0 && code != c.want {
				t.Errorf("%s: %s %s = %d %s, want %d", c.who, k.method, k.path, code, b, c.want)
			}
		}
		if got := fx.called()[before:]; c.want != 0 && len(got) != 0 {
			t.Errorf("%s: refused calls reached the executor: %v", c.who, got)
		}
	}
	// The executor got each session's calls with that session.
	for _, c := range fx.called() {
		if !strings.HasPrefix(c, e.sesA+":") && !strings.HasPrefix(c, e.sesB+":") {
			t.Errorf("executor call %q of no known session", c)
		}
	}
}

func TestExecutorRoutesNotConfigured(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct{ method, path, ctype, body string }{
		{"POST", "/v1/sessions/" + e.sesA + "/exec", "application/json", `{"code": "1"}`},
		{"POST", "/v1/sessions/" + e.sesA + "/shell", "application/json", `{"command": "ls"}`},
		{"GET", "/v1/sessions/" + e.sesA + "/runs", "", ""},
		{"GET", "/v1/sessions/" + e.sesA + "/files", "", ""},
		{"PUT", "/v1/sessions/" + e.sesA + "/files/x", "", "x"},
		{"GET", "/v1/sessions/" + e.sesA + "/files/x", "", ""},
		{"DELETE", "/v1/sessions/" + e.sesA + "/files/x", "", ""},
		{"POST", "/v1/runs/run1/cancel", "", ""},
	} {
		code, _, b := e.do(c.method, c.path, e.agentA, c.ctype, c.body)
		var ae struct{ Error string }
		_ = json.Unmarshal(b, &ae)
		if code != http.StatusNotImplemented || !strings.Contains(ae.Error, "runs no sessions") {
			t.Errorf("%s %s without an executor = %d %s, want 501", c.method, c.path, code, b)
		}
	}
}

func TestExecJSON(t *testing.T) {
	e, _ := execEnv(t, nil)
	var res broker.ExecResult
	e.mustDo("POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, "application/json", `{"code": "x = 1", "timeout": 2.5}`, 200, &res)
	if res.Status != broker.RunOK || res.Stdout != "x = 1" || len(res.Outputs) != 1 || res.Outputs[0].MIME != "image/png" || res.RunID == "" {
		t.Errorf("exec = %+v", res)
	}
	if res.DurationMS != 2 { // the fake's echo of the timeout it was given
		t.Errorf("the executor got timeout %d s, want 2.5 passed on", res.DurationMS)
	}
	e.mustDo("POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, "application/json", `{"code": "x = 1"}`, 200, &res)
	if res.DurationMS != broker.DefaultExecTimeout {
		t.Errorf("no timeout: the executor got %d s, want the default %d", res.DurationMS, broker.DefaultExecTimeout)
	}
	// A cell's exception is a result, not an HTTP error; outputs are [] not null.
	code, _, b := e.do("POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, "application/json", `{"code": "raise"}`)
	if code != 200 || !bytes.Contains(b, []byte(`"ename":"ValueError"`)) || !bytes.Contains(b, []byte(`"outputs":[]`)) {
		t.Errorf("raise = %d %s", code, b)
	}
	var sr broker.ShellResult
	e.mustDo("POST", "/v1/sessions/"+e.sesA+"/shell", e.agentA, "application/json", `{"command": "ls -l"}`, 200, &sr)
	if sr.Status != broker.RunOK || sr.Stdout != "ran ls -l\n" {
		t.Errorf("shell = %+v", sr)
	}
	// The log has a line per call with its run, never the code or the output.
	logs := e.logs.String()
	if !strings.Contains(logs, `"msg":"run"`) || !strings.Contains(logs, `"run_id":"`+sr.RunID+`"`) || !strings.Contains(logs, `"kind":"shell"`) {
		t.Errorf("no run line in the log:\n%s", logs)
	}
	if strings.Contains(logs, "x = 1") || strings.Contains(logs, "ls -l") {
		t.Errorf("the log holds code:\n%s", logs)
	}
}

func TestExecErrors(t *testing.T) {
	e, fx := execEnv(t, nil)
	big := strings.Repeat("a", broker.MaxCode+1)
	for _, c := range []struct {
		name, route, body string
		code              int
		has               string
	}{
		{"busy", "exec", `{"code": "busy"}`, 409, "calls of a session are serialised"},
		{"busy shell", "shell", `{"command": "busy"}`, 409, "/cancel"},
		{"unavailable", "exec", `{"code": "unavailable"}`, 503, "8 live sessions"},
		{"invalid", "exec", `{"code": "invalid"}`, 400, "no base"},
		{"internal", "exec", `{"code": "boom"}`, 500, "internal error"},
		{"timeout < 0", "exec", `{"code": "1", "timeout": -1}`, 400, "out of range"},
		{"timeout > max", "exec", `{"code": "1", "timeout": 601}`, 400, "at most 600"},
		{"unknown field", "exec", `{"code": "1", "cell": 2}`, 400, "unknown field"},
		{"code too big", "exec", `{"code": "` + big + `"}`, 413, "larger than"},
		{"empty command", "shell", `{"command": " "}`, 400, "empty"},
		{"body too big", "exec", `{"code": "` + strings.Repeat(`\u0000`, broker.MaxCode+broker.MaxCode/2) + `"}`, 413, "body larger"},
	} {
		code, h, b := e.do("POST", "/v1/sessions/"+e.sesA+"/"+c.route, e.agentA, "application/json", c.body)
		if code != c.code || !strings.Contains(string(b), c.has) {
			t.Errorf("%s: %d %.300s, want %d with %q", c.name, code, b, c.code, c.has)
		}
		if code == 503 && h.Get("Retry-After") == "" {
			t.Errorf("%s: 503 without Retry-After", c.name)
		}
		if strings.Contains(string(b), "/var/lib") {
			t.Errorf("%s: a host path in the answer: %s", c.name, b)
		}
	}
	// The 409 names the run that holds the session, and how to cancel it.
	go func() {
		e.do("POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, "application/json", `{"code": "block"}`)
	}()
	run := <-fx.started
	code, _, b := e.do("POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, "application/json", `{"code": "busy"}`)
	want := "another call of session " + e.sesA + " is running (run " + run + "); calls of a session are serialised: wait for it or cancel it with POST /v1/runs/" + run + "/cancel"
	if code != 409 || !strings.Contains(string(b), want) {
		t.Errorf("busy = %d %s, want %q", code, b, want)
	}
	e.mustDo("POST", "/v1/runs/"+run+"/cancel", e.agentA, "", "", 202, nil)
}

func TestExecNDJSON(t *testing.T) {
	e, fx := execEnv(t, nil)
	resp := e.send("POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, strings.NewReader(`{"code": "step"}`),
		"Content-Type", "application/json", "Accept", "application/x-ndjson")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != broker.NDJSON {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	read := func() broker.ExecEvent {
		t.Helper()
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("reading a line: %v (%q)", err, line)
		}
		var ev broker.ExecEvent
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ev); err != nil || bytes.Count(line, []byte("\n")) != 1 {
			t.Fatalf("line %q: %v", line, err)
		}
		return ev
	}
	// The first lines come while the cell still runs: each is flushed as it happens.
	if ev := read(); ev.Type != broker.EventStart || ev.RunID == "" {
		t.Errorf("first event %+v", ev)
	}
	if ev := read(); ev.Type != broker.EventStream || ev.Text != "one\n" || ev.Name != "stdout" {
		t.Errorf("second event %+v", ev)
	}
	fx.next <- struct{}{}
	if ev := read(); ev.Type != broker.EventStream || ev.Text != "two\n" {
		t.Errorf("third event %+v", ev)
	}
	ev := read()
	if ev.Type != broker.EventResult || ev.Result == nil || ev.Result.Stdout != "one\ntwo\n" || ev.Result.RunID != ev.RunID {
		t.Errorf("last event %+v", ev)
	}
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Errorf("after the result: %q (the executor's own result event must not be sent again)", rest)
	}
	// An error before the stream starts is an HTTP status; one after ends it with an error line.
	resp = e.send("POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, strings.NewReader(`{"code": "busy"}`),
		"Content-Type", "application/json", "Accept", "text/plain, application/x-ndjson")
	if resp.StatusCode != 409 {
		t.Errorf("busy stream: %d", resp.StatusCode)
	}
	resp = e.send("POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, strings.NewReader(`{"code": "midfail"}`),
		"Content-Type", "application/json", "Accept", "application/x-ndjson")
	b, _ := io.ReadAll(resp.Body)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if resp.StatusCode != 200 || len(lines) != 3 || !strings.Contains(lines[2], `"type":"error"`) || !strings.Contains(lines[2], "internal error") || strings.Contains(string(b), "/run/kernel") {
		t.Errorf("failing stream: %d %q", resp.StatusCode, lines)
	}
}

// A call, streamed or not, may take longer than the write timeout: the deadline moves
// with it, as a long poll's does.
func TestExecPastWriteTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	e, fx := execEnv(t, func(o *broker.Options) {
		o.HTTP = broker.HTTPLimits{ReadHeaderTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout}
	})
	fx.slowFor = 4 * timeout
	for _, accept := range []string{"application/json", broker.NDJSON} {
		resp := e.send("POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, strings.NewReader(`{"code": "slow"}`),
			"Content-Type", "application/json", "Accept", accept)
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || !strings.Contains(string(b), `after\n`) || !strings.Contains(string(b), `"status"`) {
			t.Errorf("slow exec (%s): %d %q %v", accept, resp.StatusCode, b, err)
		}
	}
}

func TestCancelRun(t *testing.T) {
	e, fx := execEnv(t, nil)
	type answer struct {
		code int
		res  broker.ExecResult
	}
	done := make(chan answer, 1)
	go func() {
		code, _, b := e.do("POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, "application/json", `{"code": "block"}`)
		var res broker.ExecResult
		_ = json.Unmarshal(b, &res)
		done <- answer{code, res}
	}()
	run := <-fx.started
	for _, c := range []struct {
		who, token, run string
		code            int
	}{
		{"agent B", e.agentB, run, 403},
		{"bob", e.bob, run, 403},
		{"agent B, no such run", e.agentB, "nosuch", 403},
		{"bob, no such run", e.bob, "nosuch", 404},
		{"no token", "", run, 401},
	} {
		if code, _, b := e.do("POST", "/v1/runs/"+c.run+"/cancel", c.token, "", ""); code != c.code {
			t.Errorf("%s cancelling: %d %s, want %d", c.who, code, b, c.code)
		}
	}
	var got broker.Cancelled
	e.mustDo("POST", "/v1/runs/"+run+"/cancel", e.alice, "", "", 202, &got)
	if got.RunID != run || got.SessionID != e.sesA {
		t.Errorf("cancel = %+v", got)
	}
	if a := <-done; a.code != 200 || a.res.Status != broker.RunCancelled || a.res.RunID != run {
		t.Errorf("the cancelled call answered %d %+v", a.code, a.res)
	}
	// It has ended: cancelling again is 404 from the executor.
	if code, _, b := e.do("POST", "/v1/runs/"+run+"/cancel", e.agentA, "", ""); code != 404 {
		t.Errorf("cancelling an ended run: %d %s", code, b)
	}
	var l broker.RunList
	e.mustDo("GET", "/v1/sessions/"+e.sesA+"/runs?limit=1", e.agentA, "", "", 200, &l)
	if len(l.Runs) != 1 || l.Runs[0].RunID != run || l.Runs[0].Status != broker.RunCancelled {
		t.Errorf("runs = %+v", l)
	}
	if code, _, _ := e.do("GET", "/v1/sessions/"+e.sesA+"/runs?limit=0", e.agentA, "", ""); code != 400 {
		t.Errorf("limit=0: %d", code)
	}
	// the cancel, by alice, and the run, cancelled, by the agent that ran it, in either order
	events, err := e.store.AuditLog(t.Context(), e.sesA)
	var cancelled, ran bool
	for _, ev := range events {
		cancelled = cancelled || ev.Action == "run.cancel" && ev.Actor == "alice" && ev.Detail == "run="+run
		ran = ran || ev.Action == "run.exec" && ev.Actor == e.sesA && strings.HasPrefix(ev.Detail, "run="+run+" status=cancelled ")
	}
	if err != nil || !cancelled || !ran {
		t.Errorf("audit after the cancel: %+v %v", events, err)
	}
	e.mustDo("GET", "/v1/sessions/"+e.sesB+"/runs", e.agentB, "", "", 200, &l)
	if len(l.Runs) != 0 || !strings.Contains(e.logs.String(), `"msg":"run cancel"`) {
		t.Errorf("session B's runs = %+v", l)
	}
}

// TestRunsAudited: every exec and shell call that ran is in the audit log, by the
// token's subject, with its run id, status, the code's sha256 and size and its duration,
// and never the code; a call refused before it ran (busy) is not.
func TestRunsAudited(t *testing.T) {
	e, _ := execEnv(t, nil)
	var res broker.ExecResult
	e.mustDo("POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, "application/json", `{"code": "secret_cell = 42"}`, 200, &res)
	var sr broker.ShellResult
	e.mustDo("POST", "/v1/sessions/"+e.sesA+"/shell", e.alice, "application/json", `{"command": "echo hidden"}`, 200, &sr)
	resp := e.send("POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, strings.NewReader(`{"code": "raise"}`),
		"Content-Type", "application/json", "Accept", broker.NDJSON)
	streamed, _ := io.ReadAll(resp.Body)
	if code, _, _ := e.do("POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, "application/json", `{"code": "busy"}`); code != 409 {
		t.Fatalf("busy = %d", code)
	}
	events, err := e.store.AuditLog(t.Context(), e.sesA)
	if err != nil {
		t.Fatal(err)
	}
	var runs []broker.AuditEvent
	for _, ev := range events {
		if strings.HasPrefix(ev.Action, "run.") {
			runs = append(runs, ev)
		}
	}
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	raiseRun := ""
	if i := bytes.Index(streamed, []byte(`"run_id":"`)); i >= 0 {
		raiseRun, _, _ = strings.Cut(string(streamed[i+len(`"run_id":"`):]), `"`)
	}
	want := []struct{ action, actor, prefix string }{
		{"run.exec", e.sesA, fmt.Sprintf("run=%s status=ok code_sha256=%s code_size=16 duration_ms=", res.RunID, sum("secret_cell = 42"))},
		{"run.shell", "alice", fmt.Sprintf("run=%s status=ok code_sha256=%s code_size=11 duration_ms=", sr.RunID, sum("echo hidden"))},
		{"run.exec", e.sesA, fmt.Sprintf("run=%s status=error code_sha256=%s code_size=5 duration_ms=", raiseRun, sum("raise"))},
	}
	if len(runs) != len(want) {
		t.Fatalf("run events %+v, want %d", runs, len(want))
	}
	for i, w := range want {
		ev := runs[i]
		if ev.Action != w.action || ev.Actor != w.actor || ev.SessionID != e.sesA || !strings.HasPrefix(ev.Detail, w.prefix) {
			t.Errorf("event %d = %+v, want %s by %s with %q", i, ev, w.action, w.actor, w.prefix)
		}
		if strings.Contains(ev.Detail, "secret_cell") || strings.Contains(ev.Detail, "hidden") {
			t.Errorf("event %d holds the code: %s", i, ev.Detail)
		}
	}
	if !strings.Contains(e.logs.String(), `"code_sha256":"`+sum("secret_cell = 42")+`"`) || strings.Contains(e.logs.String(), "secret_cell") {
		t.Errorf("the run's log line: want its sha256, never its code")
	}
}

// TestShellRunInFlight: a shell call under way is listed as running, the 409 of a call
// meanwhile names it, and cancelling it ends the shell call.
func TestShellRunInFlight(t *testing.T) {
	e, fx := execEnv(t, nil)
	done := make(chan broker.ShellResult, 1)
	go func() {
		_, _, b := e.do("POST", "/v1/sessions/"+e.sesA+"/shell", e.agentA, "application/json", `{"command": "block"}`)
		var res broker.ShellResult
		_ = json.Unmarshal(b, &res)
		done <- res
	}()
	run := <-fx.started
	var l broker.RunList
	e.mustDo("GET", "/v1/sessions/"+e.sesA+"/runs", e.agentA, "", "", 200, &l)
	if len(l.Runs) != 1 || l.Runs[0].RunID != run || l.Runs[0].Status != broker.RunRunning || l.Runs[0].Kind != broker.RunKindShell {
		t.Fatalf("runs while the shell call runs = %+v", l)
	}
	code, _, b := e.do("POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, "application/json", `{"code": "busy"}`)
	if want := "(run " + run + ")"; code != 409 || !strings.Contains(string(b), want) || !strings.Contains(string(b), "/v1/runs/"+run+"/cancel") {
		t.Errorf("busy during a shell call = %d %s, want 409 naming %s", code, b, run)
	}
	e.mustDo("POST", "/v1/runs/"+run+"/cancel", e.agentA, "", "", 202, nil)
	if res := <-done; res.RunID != run || res.Status != broker.RunCancelled {
		t.Errorf("the cancelled shell call answered %+v", res)
	}
}

func TestFilesRoutes(t *testing.T) {
	e, fx := execEnv(t, nil)
	base := "/v1/sessions/" + e.sesA + "/files"
	var fi broker.FileInfo
	e.mustDo("PUT", base+"/data/in.csv", e.agentA, "application/octet-stream", "a,b\n1,2\n", 200, &fi)
	if fi.Path != "data/in.csv" || fi.Size != 8 || fi.Name != "in.csv" {
		t.Errorf("put = %+v", fi)
	}
	resp := e.send("GET", base+"/data/in.csv", e.agentA, nil)
	b, _ := io.ReadAll(resp.Body)
	h := resp.Header
	if resp.StatusCode != 200 || string(b) != "a,b\n1,2\n" || h.Get("Content-Type") != "application/octet-stream" ||
		!strings.HasPrefix(h.Get("Content-Disposition"), "attachment") || h.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.Contains(h.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("get = %d %q %v", resp.StatusCode, b, h)
	}
	var l broker.FileList
	e.mustDo("GET", base+"?dir=data", e.agentA, "", "", 200, &l)
	if l.Dir != "data" || len(l.Files) != 1 || l.Files[0].Path != "data/in.csv" {
		t.Errorf("list = %+v", l)
	}
	e.mustDo("GET", base, e.agentA, "", "", 200, &l)
	if l.Dir != "." {
		t.Errorf("list of the workspace = %+v", l)
	}
	if code, _, b := e.do("PUT", base+"/big", e.agentA, "", strings.Repeat("x", int(fx.maxFile)+1)); code != 413 || !strings.Contains(string(b), "cap") {
		t.Errorf("put past the cap: %d %s", code, b)
	}
	e.mustDo("DELETE", base+"/data/in.csv", e.agentA, "", "", 204, nil)
	events, err := e.store.AuditLog(t.Context(), e.sesA)
	if err != nil {
		t.Fatal(err)
	}
	var acts []string
	for _, ev := range events {
		if strings.HasPrefix(ev.Action, "file.") {
			acts = append(acts, ev.Action+" "+ev.Actor+" "+ev.Detail)
		}
	}
	if want := []string{`file.put ` + e.sesA + ` path="data/in.csv" size=8`, `file.delete ` + e.sesA + ` path="data/in.csv"`}; !reflect.DeepEqual(acts, want) {
		t.Errorf("audit = %q, want %q", acts, want)
	}
	if code, _, _ := e.do("GET", base+"/data/in.csv", e.agentA, "", ""); code != 404 {
		t.Errorf("get after delete: %d", code)
	}
	if code, _, _ := e.do("DELETE", base+"/data/in.csv", e.agentA, "", ""); code != 404 {
		t.Errorf("delete after delete: %d", code)
	}
}

// Paths are checked at the HTTP layer too, before the executor sees them.
func TestFilesPathChecks(t *testing.T) {
	e, fx := execEnv(t, nil)
	base := "/v1/sessions/" + e.sesA + "/files"
	for _, c := range []struct{ path, has string }{
		{"/..%2F..%2Fetc%2Fpasswd", ".."},
		{"/a%2F..%2F..%2Fb", ".."},
		{"/%2Fetc%2Fpasswd", "absolute"},
		{"/a%00b", "NUL"},
		{"/a%2F%2Fb", "not clean"},
		{"/a%2F.%2Fb", "not clean"},
		{"/a%5Cb", "backslash"},
		{"/", "empty"},
		{"?dir=..", ".."},
		{"?dir=%2Fetc", "absolute"},
		{"/" + strings.Repeat("a", broker.MaxPath+1), "longer"},
	} {
		for _, m := range []string{"GET", "PUT", "DELETE"} {
			if strings.HasPrefix(c.path, "?") && m != "GET" {
				continue
			}
			code, _, b := e.do(m, base+c.path, e.agentA, "", "x")
			var ae struct{ Error, Hint string }
			_ = json.Unmarshal(b, &ae)
			if code != 400 || !strings.Contains(ae.Error, c.has) {
				t.Errorf("%s %s: %d %s, want 400 with %q", m, c.path, code, b, c.has)
			}
		}
	}
	if calls := fx.called(); len(calls) != 0 {
		t.Errorf("refused paths reached the executor: %v", calls)
	}
}

// TestExecNDJSONClientGone: a client that goes away in the middle of a stream cancels
// its cell (the call's context ends with the connection): the run ends cancelled, and
// the session is free for the next call.
func TestExecNDJSONClientGone(t *testing.T) {
	e, fx := execEnv(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", e.ts.URL+"/v1/sessions/"+e.sesA+"/exec", strings.NewReader(`{"code": "block"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.agentA)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", broker.NDJSON)
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	run := <-fx.started
	if line, err := bufio.NewReader(resp.Body).ReadBytes('\n'); err != nil || !bytes.Contains(line, []byte(run)) {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel() // the client goes away
	resp.Body.Close()
	for {
		fx.mu.Lock()
		var status string
		for _, r := range fx.runs {
			if r.RunID == run {
				status = r.Status
			}
		}
		_, running := fx.cancels[run]
		fx.mu.Unlock()
		if !running {
			if status != broker.RunCancelled {
				t.Fatalf("run %s ended %q, want cancelled", run, status)
			}
			break
		}
		time.Sleep(time.Millisecond) // polls the condition above
	}
	if resp := e.send("POST", "/v1/sessions/"+e.sesA+"/exec", e.agentA, strings.NewReader(`{"code": "1"}`), "Content-Type", "application/json"); resp.StatusCode != 200 {
		t.Fatalf("the next call: %d", resp.StatusCode)
	}
}
