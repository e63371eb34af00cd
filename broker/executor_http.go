package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limits of the executor's routes.
const (
	MaxCode       = 1 << 20 // bytes of code in one exec (or of a shell command)
	MaxPath       = 4096    // bytes of a workspace path
	DefaultRuns   = 20      // runs GET /v1/sessions/{id}/runs lists by default
	MaxRuns       = 100     // and at most
	NDJSON        = "application/x-ndjson"
	maxExecBody   = 6*MaxCode + 64<<10 // JSON escapes a byte in at most 6
	execStartTime = time.Minute        // what a call may take past its timeout: a (re)start, the interrupt's grace
)

// executorRoutes are the warm sessions' routes (Options.Executor).
func (s *Server) executorRoutes() []route {
	return []route{
		{"POST /v1/sessions/{id}/exec", anyRole, s.exec},
		{"POST /v1/sessions/{id}/shell", anyRole, s.shell},
		{"GET /v1/sessions/{id}/runs", anyRole, s.runs},
		{"POST /v1/runs/{run_id}/cancel", anyRole, s.cancelRun},
		{"GET /v1/sessions/{id}/files", anyRole, s.listFiles},
		{"PUT /v1/sessions/{id}/files/{path...}", anyRole, s.putFile},
		{"GET /v1/sessions/{id}/files/{path...}", anyRole, s.getFile},
		{"DELETE /v1/sessions/{id}/files/{path...}", anyRole, s.deleteFile},
	}
}

// execSession is the session of the route's {id} for t, once the broker is known to run
// sessions; otherwise it has answered (501, 403, 404).
func (s *Server) execSession(w http.ResponseWriter, r *http.Request, t Token) (Session, bool) {
	if s.o.Executor == nil {
		writeError(w, http.StatusNotImplemented, "this broker runs no sessions", "run pylayer serve on a host that runs the sandboxes, or send the call to one")
		return Session{}, false
	}
	return s.execSessionOf(w, r, t, r.PathValue("id"))
}

// execSessionOf is session id for t: as the broker answered the call on a sandbox host
// (NewExecHost, which authorised it), else from the store.
func (s *Server) execSessionOf(w http.ResponseWriter, r *http.Request, t Token, id string) (Session, bool) {
	if g, ok := grantFrom(r.Context()); ok {
		if g.env.Session.ID != id {
			writeError(w, http.StatusForbidden, "this call was authorised for another session", "")
			return Session{}, false
		}
		return g.env.Session, true
	}
	return s.session(w, r, t, id)
}

// callTimeout checks a request's timeout in seconds; 0 is the default.
// callLimits checks a call's text (its code or command, at most MaxCode bytes) and its
// timeout (callTimeout), answering the client when either is out of bounds.
func callLimits(w http.ResponseWriter, what, text, longer string, secs float64) (time.Duration, bool) {
	if len(text) > MaxCode {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s of %d bytes is larger than %d", what, len(text), MaxCode),
			fmt.Sprintf("write a long %s to a file (PUT /v1/sessions/{id}/files/...) and run that", longer))
		return 0, false
	}
	return callTimeout(w, secs)
}

func callTimeout(w http.ResponseWriter, secs float64) (time.Duration, bool) {
	switch {
	case secs == 0:
		secs = DefaultExecTimeout
	case secs < 0 || math.IsNaN(secs) || secs > MaxExecTimeout:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout %g s is out of range", secs),
			fmt.Sprintf("give seconds above 0 and at most %d (0 or none is %d)", MaxExecTimeout, DefaultExecTimeout))
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}

// longCall gives a call's answer until its timeout (and the time a restart or an
// interrupt may add) to start leaving, as a long poll's wait; the returned func moves the
// write deadline again from now, after each line of a stream has left.
func (s *Server) longCall(w http.ResponseWriter, timeout time.Duration) func() {
	end := time.Now().Add(timeout + execStartTime)
	extend := func() { extendDeadlines(w, 0, max(time.Until(end), 0)+s.o.HTTP.WriteTimeout) }
	extend()
	return extend
}

// wantsNDJSON reports whether the request's Accept asks for a stream of events.
func wantsNDJSON(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == NDJSON {
			return true
		}
	}
	return false
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request, t Token) {
	se, ok := s.execSession(w, r, t)
	if !ok {
		return
	}
	var req ExecRequest
	if s.decodeJSONMax(w, r, &req, false, maxExecBody) != nil {
		return
	}
	timeout, ok := callLimits(w, "code", req.Code, "program", req.Timeout)
	if !ok {
		return
	}
	req.Timeout = timeout.Seconds()
	extend := s.longCall(w, timeout)
	start := time.Now()
	if !wantsNDJSON(r) {
		res, err := s.o.Executor.Exec(r.Context(), se, req, nil)
		s.recordRun(r, t, se, RunKindExec, req.Code, res.RunID, res.Status, start, err)
		if err != nil {
			s.executorError(w, r, se, err)
			return
		}
		writeJSON(w, http.StatusOK, normalResult(res))
		return
	}
	st := &eventStream{w: w, extend: extend}
	res, err := s.o.Executor.Exec(r.Context(), se, req, st.emit)
	s.recordRun(r, t, se, RunKindExec, req.Code, res.RunID, res.Status, start, err)
	if !st.close() { // nothing was sent: the answer may still be an error status
		if err != nil {
			s.executorError(w, r, se, err)
			return
		}
		st.header()
	}
	if err != nil {
		msg, _ := s.executorMessage(r, se, err)
		st.write(ExecEvent{Type: "error", RunID: res.RunID, Reason: msg})
		return
	}
	res = normalResult(res)
	st.write(ExecEvent{Type: EventResult, RunID: res.RunID, Result: &res})
}

// normalResult is res as the API answers it: outputs a list, never null.
func normalResult(res ExecResult) ExecResult {
	if res.Outputs == nil {
		res.Outputs = []Output{}
	}
	return res
}

// eventStream writes an exec call's events as NDJSON, one line each, flushed as it comes.
// The executor may call emit from its own goroutine; nothing is written once the call has
// returned (close), and the stream's own "result" line is the last.
type eventStream struct {
	mu     sync.Mutex
	w      http.ResponseWriter
	extend func()
	sent   bool // the header is out
	closed bool
	broken bool // a write failed: the client is gone
}

func (e *eventStream) header() {
	h := e.w.Header()
	h.Set("Content-Type", NDJSON)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	e.w.WriteHeader(http.StatusOK)
	e.sent = true
}

// emit is the executor's callback; the executor's own "result" event is left out, since
// the stream ends with the result the call returned.
func (e *eventStream) emit(ev ExecEvent) {
	if ev.Type == EventResult {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	if !e.sent {
		e.header()
	}
	e.line(ev)
}

// close stops emit and reports whether anything was sent.
func (e *eventStream) close() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	return e.sent
}

// write sends a last line after close.
func (e *eventStream) write(ev ExecEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.line(ev)
}

func (e *eventStream) line(ev ExecEvent) {
	if e.broken {
		return
	}
	b, err := json.Marshal(ev)
	if err != nil { // a string field that is not UTF-8 is replaced, not refused; this cannot happen
		return
	}
	b = append(b, '\n')
	if _, err := e.w.Write(b); err != nil {
		e.broken = true
		return
	}
	if err := http.NewResponseController(e.w).Flush(); err != nil {
		e.broken = true
		return
	}
	e.extend()
}

func (s *Server) shell(w http.ResponseWriter, r *http.Request, t Token) {
	se, ok := s.execSession(w, r, t)
	if !ok {
		return
	}
	var req ShellRequest
	if s.decodeJSONMax(w, r, &req, false, maxExecBody) != nil {
		return
	}
	if strings.TrimSpace(req.Command) == "" {
		writeError(w, http.StatusBadRequest, "the command is empty", `send {"command": "ls -l", "timeout": 30}`)
		return
	}
	timeout, ok := callLimits(w, "command", req.Command, "script", req.Timeout)
	if !ok {
		return
	}
	req.Timeout = timeout.Seconds()
	s.longCall(w, timeout)
	start := time.Now()
	res, err := s.o.Executor.Shell(r.Context(), se, req)
	s.recordRun(r, t, se, RunKindShell, req.Command, res.RunID, res.Status, start, err)
	if err != nil {
		s.executorError(w, r, se, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// recordRun writes the log line and the audit event of one exec or shell call: who,
// which run, what kind, the code's sha256 and size (never the code or its output), how
// it ended and how long it took. It runs before the answer is sent, so that a call the
// client saw complete has its event in the store (whose group commit batches the events
// of concurrent calls); a store that fails to take it is logged, and the answer stands. A
// call refused before it ran (no run id) is only logged. Without a store (a sandbox host
// of a remote broker, NewExecHost) the log line is the record.
func (s *Server) recordRun(r *http.Request, t Token, se Session, kind, code, runID, status string, start time.Time, err error) {
	ms := time.Since(start).Milliseconds()
	sum := sha256.Sum256([]byte(code))
	if err != nil && status == "" {
		status = "failed"
	}
	attrs := []slog.Attr{slog.String("kind", kind), slog.String("session", se.ID), slog.String("run_id", runID),
		slog.String("status", status), slog.Int64("duration_ms", ms),
		slog.String("code_sha256", hex.EncodeToString(sum[:])), slog.Int("code_size", len(code)),
		slog.String("subject", t.Subject), slog.String("role", t.Role)}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	s.log.LogAttrs(r.Context(), level, "run", attrs...)
	if runID == "" || s.o.Store == nil {
		return
	}
	s.auditRun(r, t, AuditEvent{Action: "run." + kind, SessionID: se.ID,
		Detail: fmt.Sprintf("run=%s status=%s code_sha256=%x code_size=%d duration_ms=%d", runID, status, sum, len(code), ms)})
}

// auditRun appends the audit event of a run or of a change to a session's workspace,
// which has happened: a store that fails to take it is logged, and the answer stands.
// Without a store (NewExecHost) there is nothing to append to: the route's log line is
// the record.
func (s *Server) auditRun(r *http.Request, t Token, e AuditEvent) {
	if s.o.Store == nil {
		return
	}
	if err := s.audit(contextWithoutCancel(r), t, e); err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelError, "audit", slog.String("action", e.Action), slog.String("session", e.SessionID), slog.String("error", err.Error()))
	}
}

// RunList is what GET /v1/sessions/{id}/runs answers.
type RunList struct {
	Runs []RunInfo `json:"runs"`
}

func (s *Server) runs(w http.ResponseWriter, r *http.Request, t Token) {
	se, ok := s.execSession(w, r, t)
	if !ok {
		return
	}
	limit := DefaultRuns
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit=%q is not a positive number", v), fmt.Sprintf("give 1 to %d", MaxRuns))
			return
		}
		limit = min(n, MaxRuns)
	}
	l := s.o.Executor.Runs(se.ID, limit)
	if l == nil {
		l = []RunInfo{}
	}
	writeJSON(w, http.StatusOK, RunList{Runs: l})
}

// Cancelled is what POST /v1/runs/{run_id}/cancel answers.
type Cancelled struct {
	RunID     string `json:"run_id"`
	SessionID string `json:"session_id"`
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request, t Token) {
	if s.o.Executor == nil {
		writeError(w, http.StatusNotImplemented, "this broker runs no sessions", "send the call to the host that runs the session")
		return
	}
	id := r.PathValue("run_id")
	sid, ok := s.o.Executor.RunSession(id)
	if !ok {
		if t.Role == RoleAgent { // as for requests: an agent learns nothing of other sessions' runs
			writeError(w, http.StatusForbidden, "this token is for another session", "")
			return
		}
		writeError(w, http.StatusNotFound, "no run "+id+" on this host", "GET /v1/sessions/{id}/runs lists a session's recent runs")
		return
	}
	se, ok := s.execSessionOf(w, r, t, sid)
	if !ok {
		return
	}
	err := s.o.Executor.Cancel(r.Context(), id)
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "run cancel", slog.String("session", se.ID), slog.String("run_id", id),
		slog.String("subject", t.Subject), slog.String("role", t.Role), slog.Bool("ok", err == nil))
	if err != nil {
		s.executorError(w, r, se, err)
		return
	}
	s.auditRun(r, t, AuditEvent{Action: "run.cancel", SessionID: se.ID, Detail: "run=" + id})
	writeJSON(w, http.StatusAccepted, Cancelled{RunID: id, SessionID: se.ID})
}

// workspacePath checks a path of the session's workspace as the API takes it: relative,
// clean, slash-separated, without "..", NUL or a leading "/". dir allows "" and "." (the
// workspace itself). The executor checks again, against the file system (symlinks).
func workspacePath(w http.ResponseWriter, p string, dir bool) (string, bool) {
	bad := func(why, hint string) (string, bool) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("path %q %s", p, why), hint)
		return "", false
	}
	switch {
	case dir && (p == "" || p == "."):
		return ".", true
	case p == "":
		return bad("is empty", "name a file of the workspace, e.g. files/data/input.csv; list a directory with GET /v1/sessions/{id}/files?dir=PATH")
	case len(p) > MaxPath:
		return bad(fmt.Sprintf("is longer than %d bytes", MaxPath), "")
	case strings.ContainsRune(p, 0):
		return bad("holds a NUL byte", "")
	case strings.HasPrefix(p, "/"):
		return bad("is absolute", "paths are relative to the session's workspace: drop the leading /")
	case strings.ContainsRune(p, '\\'):
		return bad("holds a backslash", "separate directories with /")
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return bad("leaves the workspace (..)", "paths are relative to the session's workspace and stay in it")
		}
	}
	if c := path.Clean(p); c != p {
		return bad("is not clean", fmt.Sprintf("send it as %q", c))
	}
	return p, true
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, t Token) {
	se, ok := s.execSession(w, r, t)
	if !ok {
		return
	}
	dir, ok := workspacePath(w, r.URL.Query().Get("dir"), true)
	if !ok {
		return
	}
	l, err := s.o.Executor.ListFiles(r.Context(), se, dir)
	if err != nil {
		s.executorError(w, r, se, err)
		return
	}
	if l == nil {
		l = []FileInfo{}
	}
	writeJSON(w, http.StatusOK, FileList{Dir: dir, Files: l})
}

// FileList is what GET /v1/sessions/{id}/files answers.
type FileList struct {
	Dir   string     `json:"dir"`
	Files []FileInfo `json:"files"`
}

func (s *Server) putFile(w http.ResponseWriter, r *http.Request, t Token) {
	se, ok := s.execSession(w, r, t)
	if !ok {
		return
	}
	p, ok := workspacePath(w, r.PathValue("path"), false)
	if !ok {
		return
	}
	// A file may be large: its body gets the upload timeout, as a wheel's does. The bytes
	// stream to the executor, which enforces its size cap.
	extendDeadlines(w, s.o.HTTP.UploadTimeout, 0)
	fi, err := s.o.Executor.PutFile(r.Context(), se, p, r.Body)
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "file put", slog.String("session", se.ID), slog.Int64("size", fi.Size),
		slog.String("subject", t.Subject), slog.Bool("ok", err == nil))
	if err != nil {
		if errTimeout(err) {
			s.bodyError(w, "reading the file", err)
			return
		}
		s.executorError(w, r, se, err)
		return
	}
	s.auditRun(r, t, AuditEvent{Action: "file.put", SessionID: se.ID, Detail: fmt.Sprintf("path=%q size=%d", p, fi.Size)})
	writeJSON(w, http.StatusOK, fi)
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request, t Token) {
	se, ok := s.execSession(w, r, t)
	if !ok {
		return
	}
	p, ok := workspacePath(w, r.PathValue("path"), false)
	if !ok {
		return
	}
	rc, fi, err := s.o.Executor.OpenFile(r.Context(), se, p)
	if err != nil {
		s.executorError(w, r, se, err)
		return
	}
	defer rc.Close()
	// The bytes are the session's, not the broker's: never rendered in the broker's origin.
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	if !fi.MTime.IsZero() {
		h.Set("Last-Modified", fi.MTime.UTC().Format(http.TimeFormat))
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	extendDeadlines(w, 0, s.o.HTTP.UploadTimeout) // as long as an upload of it may take
	if _, err := io.Copy(w, rc); err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "file get cut short", slog.String("session", se.ID), slog.String("error", err.Error()))
	}
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request, t Token) {
	se, ok := s.execSession(w, r, t)
	if !ok {
		return
	}
	p, ok := workspacePath(w, r.PathValue("path"), false)
	if !ok {
		return
	}
	err := s.o.Executor.DeleteFile(r.Context(), se, p)
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "file delete", slog.String("session", se.ID),
		slog.String("subject", t.Subject), slog.Bool("ok", err == nil))
	if err != nil {
		s.executorError(w, r, se, err)
		return
	}
	s.auditRun(r, t, AuditEvent{Action: "file.delete", SessionID: se.ID, Detail: fmt.Sprintf("path=%q", p)})
	w.WriteHeader(http.StatusNoContent)
}

// executorMessage is what an executor's error tells the client (without host paths), and
// its status.
func (s *Server) executorMessage(r *http.Request, se Session, err error) (string, int) {
	msg := RedactPaths(err.Error())
	switch {
	case errors.Is(err, ErrBusy):
		run := "" // the run under way, which the executor lists first
		if l := s.o.Executor.Runs(se.ID, 1); len(l) == 1 && l[0].Status == RunRunning {
			run = l[0].RunID
		}
		if run == "" {
			return fmt.Sprintf("another call of session %s is running; calls of a session are serialised: wait for it or cancel it with POST /v1/runs/{run_id}/cancel (GET /v1/sessions/%s/runs names it)", se.ID, se.ID), http.StatusConflict
		}
		return fmt.Sprintf("another call of session %s is running (run %s); calls of a session are serialised: wait for it or cancel it with POST /v1/runs/%s/cancel", se.ID, run, run), http.StatusConflict
	case errors.Is(err, ErrTooLarge):
		return msg, http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrNotFound):
		return msg, http.StatusNotFound
	case errors.Is(err, ErrInvalid):
		return msg, http.StatusBadRequest
	case errors.Is(err, ErrUnavailable):
		return msg, http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		return "the call was cancelled: the client went away", 499
	}
	return "internal error", http.StatusInternalServerError
}

// executorError answers an executor's error with its status.
func (s *Server) executorError(w http.ResponseWriter, r *http.Request, se Session, err error) {
	msg, code := s.executorMessage(r, se, err)
	switch code {
	case http.StatusInternalServerError:
		s.internal(w, r, err)
	case http.StatusServiceUnavailable:
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "executor unavailable", slog.String("session", se.ID), slog.String("error", err.Error()))
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
		writeError(w, code, msg, "this host runs as many live sessions as it may, all busy: retry after the Retry-After header's seconds")
	default:
		writeError(w, code, msg, "")
	}
}
