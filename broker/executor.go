package broker

import (
	"context"
	"errors"
	"io"
	"time"
)

// Executor runs a session's code in its warm sandbox: one persistent interpreter process
// per session, started on first use, with the session's workspace. The broker's routes
// (executor_http.go) check the caller's token against the session before calling it;
// an Executor trusts the Session it is given. Calls of one session are serialised: a
// call while another runs returns an error wrapping ErrBusy. Errors wrap the broker's
// sentinels: ErrBusy (409), ErrTooLarge (413), ErrNotFound (404), ErrInvalid (400),
// ErrUnavailable (503 with Retry-After: the host's cap is full of busy sessions).
// broker/executor's Manager implements it.
type Executor interface {
	// Exec runs req.Code in the session's interpreter, calling emit (if not nil) with
	// each event as it happens, the last being the "result" event. A cancelled ctx
	// interrupts the cell (status "cancelled").
	Exec(ctx context.Context, s Session, req ExecRequest, emit func(ExecEvent)) (ExecResult, error)
	// Shell runs req.Command with /bin/sh -c in the session's sandbox.
	Shell(ctx context.Context, s Session, req ShellRequest) (ShellResult, error)
	// Cancel interrupts the run runID if it is still running; ErrNotFound if no such run
	// is known.
	Cancel(ctx context.Context, runID string) error
	// RunSession says whose run runID is, for the auth check before Cancel.
	RunSession(runID string) (sessionID string, ok bool)
	// Runs lists up to limit of the session's recent runs, newest first: a run under way
	// first, with status RunRunning, so that a call refused with ErrBusy can name it.
	Runs(sessionID string, limit int) []RunInfo
	// PutFile writes body to path (relative to the workspace), replacing it; a body past
	// the executor's cap is ErrTooLarge and leaves nothing behind.
	PutFile(ctx context.Context, s Session, path string, body io.Reader) (FileInfo, error)
	// OpenFile opens the regular file at path for reading; the caller closes it.
	OpenFile(ctx context.Context, s Session, path string) (io.ReadCloser, FileInfo, error)
	// ListFiles lists the directory dir ("" or "." is the workspace itself).
	ListFiles(ctx context.Context, s Session, dir string) ([]FileInfo, error)
	// DeleteFile removes the file (or empty directory) at path.
	DeleteFile(ctx context.Context, s Session, path string) error
}

// More sentinel errors, of an Executor.
var (
	// ErrBusy: another call of the session is running; calls of a session are serialised.
	ErrBusy = errors.New("session busy")
	// ErrTooLarge: a file or body past the executor's cap.
	ErrTooLarge = errors.New("too large")
)

// Run statuses of ExecResult, ShellResult and RunInfo.
const (
	RunOK        = "ok"
	RunError     = "error"
	RunTimeout   = "timeout"
	RunCancelled = "cancelled"
	// RunRunning is a run still under way, in RunInfo only.
	RunRunning = "running"
)

// SessionSource is what an Executor reads, on every call, of the session it runs: the
// session and its bindings, whose digests say which layers its process must hold. A
// Store is one, on the broker's own host; GrantedSessions is the one of a sandbox host
// serving a remote broker (NewExecHost), which has no database.
type SessionSource interface {
	GetSession(ctx context.Context, id string) (Session, error)
	Bindings(ctx context.Context, sessionID string) ([]Binding, error)
}

var _ SessionSource = Store(nil)

// Run kinds of RunInfo.
const (
	RunKindExec  = "exec"
	RunKindShell = "shell"
)

// Limits of an exec or shell call's timeout, in seconds.
const (
	DefaultExecTimeout = 30
	MaxExecTimeout     = 600
)

// ExecRequest is the body of POST /v1/sessions/{id}/exec.
type ExecRequest struct {
	Code    string  `json:"code"`
	Timeout float64 `json:"timeout"` // seconds; 0 is DefaultExecTimeout, at most MaxExecTimeout
	Reset   bool    `json:"reset"`   // restart the interpreter before running Code
}

// ShellRequest is the body of POST /v1/sessions/{id}/shell.
type ShellRequest struct {
	Command string  `json:"command"`
	Timeout float64 `json:"timeout"` // seconds, as ExecRequest's
}

// Event types of ExecEvent.
const (
	EventStart   = "start"
	EventStream  = "stream"  // Name stdout|stderr, Text
	EventDisplay = "display" // MIME, Data (base64 for binary types)
	EventRestart = "restart" // Reason: the interpreter was (re)started
	EventResult  = "result"  // Result: the last event of a call
)

// ExecEvent is one line of an exec call's NDJSON stream.
type ExecEvent struct {
	Type   string      `json:"type"`
	RunID  string      `json:"run_id"`
	Name   string      `json:"name,omitempty"`
	Text   string      `json:"text,omitempty"`
	MIME   string      `json:"mime,omitempty"`
	Data   string      `json:"data,omitempty"`
	Reason string      `json:"reason,omitempty"`
	Result *ExecResult `json:"result,omitempty"`
}

// ExecError is the exception a cell raised.
type ExecError struct {
	EName     string   `json:"ename"`
	EValue    string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

// Output is one rich output of a cell: Data is base64 for binary MIME types (image/png).
type Output struct {
	MIME string `json:"mime"`
	Data string `json:"data"`
}

// ExecResult is what an exec call answers.
type ExecResult struct {
	RunID            string     `json:"run_id"`
	Status           string     `json:"status"` // RunOK, RunError, RunTimeout, RunCancelled
	Stdout           string     `json:"stdout"`
	Stderr           string     `json:"stderr"`
	StdoutTruncated  bool       `json:"stdout_truncated,omitempty"`
	StderrTruncated  bool       `json:"stderr_truncated,omitempty"`
	Error            *ExecError `json:"error,omitempty"`
	Outputs          []Output   `json:"outputs"`
	OutputsTruncated bool       `json:"outputs_truncated,omitempty"`
	DurationMS       int64      `json:"duration_ms"`
	Restarted        bool       `json:"restarted,omitempty"`
	RestartReason    string     `json:"restart_reason,omitempty"`
}

// ShellResult is what a shell call answers.
type ShellResult struct {
	RunID           string `json:"run_id"`
	Status          string `json:"status"`
	ExitCode        int    `json:"exit_code"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	DurationMS      int64  `json:"duration_ms"`
	Restarted       bool   `json:"restarted,omitempty"`
	RestartReason   string `json:"restart_reason,omitempty"`
}

// RunInfo is one recent run of a session.
type RunInfo struct {
	RunID      string    `json:"run_id"`
	SessionID  string    `json:"session_id"`
	Kind       string    `json:"kind"`   // RunKindExec or RunKindShell
	Status     string    `json:"status"` // a Run* status; RunRunning while under way
	Started    time.Time `json:"started"`
	DurationMS int64     `json:"duration_ms"` // so far, while running
	Summary    string    `json:"summary"`     // the first line of the code, at most 80 characters
}

// File types of FileInfo.
const (
	FileRegular = "file"
	FileDir     = "dir"
	FileSymlink = "symlink"
	FileOther   = "other"
)

// FileInfo is one file of a session's workspace.
type FileInfo struct {
	Name  string    `json:"name"`
	Path  string    `json:"path"` // relative to the workspace, slash-separated
	Size  int64     `json:"size"`
	Type  string    `json:"type"` // FileRegular, FileDir, FileSymlink or FileOther
	MTime time.Time `json:"mtime"`
}
