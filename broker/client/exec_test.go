package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/client"
	"github.com/pylayer/pylayer/broker/sqlite"
)

// executor echoes code as stdout (with a start event and a PNG display), is busy for
// "busy", waits for a cancel for "block"; its files live in memory, capped at 16 bytes.
type executor struct {
	mu      sync.Mutex
	files   map[string][]byte
	running map[string]chan struct{}
	runs    []broker.RunInfo
	started chan string
}

func (x *executor) Exec(ctx context.Context, s broker.Session, req broker.ExecRequest, emit func(broker.ExecEvent)) (broker.ExecResult, error) {
	if req.Code == "busy" {
		return broker.ExecResult{}, fmt.Errorf("exec: %w", broker.ErrBusy)
	}
	x.mu.Lock()
	id := fmt.Sprintf("run%d", len(x.runs)+1)
	x.runs = append([]broker.RunInfo{{RunID: id, SessionID: s.ID, Kind: broker.RunKindExec, Status: broker.RunOK, Summary: req.Code}}, x.runs...)
	stop := make(chan struct{})
	x.running[id] = stop
	x.mu.Unlock()
	if emit != nil {
		emit(broker.ExecEvent{Type: broker.EventStart, RunID: id})
		emit(broker.ExecEvent{Type: broker.EventStream, RunID: id, Name: "stdout", Text: req.Code})
		emit(broker.ExecEvent{Type: broker.EventDisplay, RunID: id, MIME: "image/png", Data: "iVBORw0KGgo="})
	}
	res := broker.ExecResult{RunID: id, Status: broker.RunOK, Stdout: req.Code, Outputs: []broker.Output{{MIME: "image/png", Data: "iVBORw0KGgo="}}}
	if req.Code == "block" {
		x.started <- id
		<-stop
		res = broker.ExecResult{RunID: id, Status: broker.RunCancelled}
	}
	return res, nil
}

func (x *executor) Shell(ctx context.Context, s broker.Session, req broker.ShellRequest) (broker.ShellResult, error) {
	return broker.ShellResult{RunID: "sh1", Status: broker.RunError, ExitCode: 3, Stderr: "no " + req.Command}, nil
}

func (x *executor) Cancel(ctx context.Context, runID string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	c, ok := x.running[runID]
	if !ok {
		return broker.ErrNotFound
	}
	delete(x.running, runID)
	close(c)
	return nil
}

func (x *executor) RunSession(runID string) (string, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, r := range x.runs {
		if r.RunID == runID {
			return r.SessionID, true
		}
	}
	return "", false
}

func (x *executor) Runs(sessionID string, limit int) []broker.RunInfo {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]broker.RunInfo(nil), x.runs[:min(limit, len(x.runs))]...)
}

func (x *executor) PutFile(ctx context.Context, s broker.Session, p string, body io.Reader) (broker.FileInfo, error) {
	b, err := io.ReadAll(io.LimitReader(body, 17))
	if err != nil {
		return broker.FileInfo{}, err
	}
	if len(b) > 16 {
		return broker.FileInfo{}, fmt.Errorf("%w: the cap is 16 bytes", broker.ErrTooLarge)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.files[p] = b
	return broker.FileInfo{Name: path.Base(p), Path: p, Size: int64(len(b)), Type: broker.FileRegular}, nil
}

func (x *executor) OpenFile(ctx context.Context, s broker.Session, p string) (io.ReadCloser, broker.FileInfo, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	b, ok := x.files[p]
	if !ok {
		return nil, broker.FileInfo{}, broker.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), broker.FileInfo{Path: p, Size: int64(len(b))}, nil
}

func (x *executor) ListFiles(ctx context.Context, s broker.Session, dir string) ([]broker.FileInfo, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var l []broker.FileInfo
	for p, b := range x.files {
		l = append(l, broker.FileInfo{Name: path.Base(p), Path: p, Size: int64(len(b)), Type: broker.FileRegular})
	}
	return l, nil
}

func (x *executor) DeleteFile(ctx context.Context, s broker.Session, p string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.files[p]; !ok {
		return broker.ErrNotFound
	}
	delete(x.files, p)
	return nil
}

// execBroker is a broker with a fake executor, an agent client of one session and an
// agent client of another.
func execBroker(t *testing.T) (x *executor, session string, agent, other *client.Client) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "broker.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	x = &executor{files: map[string][]byte{}, running: map[string]chan struct{}{}, started: make(chan string, 1)}
	srv, err := broker.NewServer(broker.Options{Store: st, Classifier: classifier{}, Executor: x})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	secret, err := srv.CreateToken(ctx, broker.RoleOwner, "alice")
	if err != nil {
		t.Fatal(err)
	}
	owner, err := client.New(ts.URL, secret)
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]broker.CreatedSession
	for i := range cs {
		if cs[i], err = owner.CreateSession(ctx, client.NewSession{}); err != nil {
			t.Fatal(err)
		}
	}
	return x, cs[0].Session.ID, owner.WithToken(cs[0].AgentToken), owner.WithToken(cs[1].AgentToken)
}

func TestExecCalls(t *testing.T) {
	ctx := context.Background()
	x, id, agent, other := execBroker(t)
	res, err := agent.Exec(ctx, id, broker.ExecRequest{Code: "print(1)"})
	if err != nil || res.Status != broker.RunOK || res.Stdout != "print(1)" || len(res.Outputs) != 1 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	var events []string
	res, err = agent.ExecStream(ctx, id, broker.ExecRequest{Code: "x"}, func(ev broker.ExecEvent) { events = append(events, ev.Type+":"+ev.Text) })
	if err != nil || res.Stdout != "x" || strings.Join(events, ",") != "start:,stream:x,display:" {
		t.Errorf("ExecStream = %+v, %v; events %v", res, err, events)
	}
	_, err = agent.Exec(ctx, id, broker.ExecRequest{Code: "busy"})
	if e := apiError(t, err, 409); !errors.Is(err, broker.ErrBusy) || !strings.Contains(e.Message, "serialised") {
		t.Errorf("busy: %v", err)
	}
	if _, err := agent.ExecStream(ctx, id, broker.ExecRequest{Code: "busy"}, nil); !errors.Is(err, broker.ErrBusy) {
		t.Errorf("busy stream: %v", err)
	}
	if _, err := other.Exec(ctx, id, broker.ExecRequest{Code: "1"}); apiError(t, err, 403) == nil {
		t.Error("another session's agent ran code")
	}
	sh, err := agent.Shell(ctx, id, broker.ShellRequest{Command: "ls"})
	if err != nil || sh.ExitCode != 3 || sh.Stderr != "no ls" || sh.Status != broker.RunError {
		t.Errorf("Shell = %+v, %v", sh, err)
	}
	runs, err := agent.Runs(ctx, id, 1)
	if err != nil || len(runs) != 1 || runs[0].Summary != "x" {
		t.Errorf("Runs = %+v, %v", runs, err)
	}

	// Cancel: another session's agent may not; this one's may, and the call says cancelled.
	done := make(chan broker.ExecResult, 1)
	go func() {
		r, err := agent.Exec(ctx, id, broker.ExecRequest{Code: "block"})
		if err != nil {
			t.Errorf("blocked Exec: %v", err)
		}
		done <- r
	}()
	run := <-x.started
	if err := other.Cancel(ctx, run); apiError(t, err, 403) == nil {
		t.Error("another session's agent cancelled a run")
	}
	if err := agent.Cancel(ctx, run); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if r := <-done; r.Status != broker.RunCancelled || r.RunID != run {
		t.Errorf("cancelled Exec = %+v", r)
	}
	if err := agent.Cancel(ctx, run); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("Cancel of an ended run: %v", err)
	}
}

func TestFileCalls(t *testing.T) {
	ctx := context.Background()
	_, id, agent, other := execBroker(t)
	// A name with a space, a '#' and a '?' goes as one path, not a fragment or a query.
	const name = "data dir/a #1?.txt"
	fi, err := agent.PutFile(ctx, id, name, strings.NewReader("hello"))
	if err != nil || fi.Path != name || fi.Size != 5 {
		t.Fatalf("PutFile = %+v, %v", fi, err)
	}
	var buf bytes.Buffer
	if n, err := agent.GetFile(ctx, id, name, &buf); err != nil || n != 5 || buf.String() != "hello" {
		t.Errorf("GetFile = %d %q, %v", n, buf.String(), err)
	}
	if l, err := agent.ListFiles(ctx, id, ""); err != nil || len(l) != 1 || l[0].Path != name {
		t.Errorf("ListFiles = %+v, %v", l, err)
	}
	if _, err := agent.PutFile(ctx, id, "big", strings.NewReader(strings.Repeat("x", 17))); !errors.Is(err, broker.ErrTooLarge) {
		t.Errorf("PutFile past the cap: %v", err)
	}
	for _, p := range []string{"../etc/passwd", "a//b", "/etc/passwd", "a/../../b", ""} {
		if _, err := agent.PutFile(ctx, id, p, strings.NewReader("x")); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("PutFile %q: %v, want ErrInvalid", p, err)
		}
	}
	if _, err := other.GetFile(ctx, id, name, io.Discard); apiError(t, err, 403) == nil {
		t.Error("another session's agent read a file")
	}
	if err := agent.DeleteFile(ctx, id, name); err != nil {
		t.Errorf("DeleteFile: %v", err)
	}
	if _, err := agent.GetFile(ctx, id, name, io.Discard); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("GetFile after delete: %v", err)
	}
	if err := agent.DeleteFile(ctx, id, name); !errors.Is(err, broker.ErrNotFound) || errors.Is(err, broker.ErrBusy) {
		t.Errorf("DeleteFile again: %v", err)
	}
	var e *client.Error
	if _, err := agent.GetFile(ctx, id, "nosuch", io.Discard); !errors.As(err, &e) || e.Endpoint != "GET /v1/sessions/{id}/files/{path...}" {
		t.Errorf("GetFile's error %v does not name the route", err)
	}
}
