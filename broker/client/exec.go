package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// The endpoints of a session's warm sandbox (broker.Executor).
const (
	epExec       = "POST /v1/sessions/{id}/exec"
	epShell      = "POST /v1/sessions/{id}/shell"
	epRuns       = "GET /v1/sessions/{id}/runs"
	epCancel     = "POST /v1/runs/{run_id}/cancel"
	epListFiles  = "GET /v1/sessions/{id}/files"
	epPutFile    = "PUT /v1/sessions/{id}/files/{path...}"
	epGetFile    = "GET /v1/sessions/{id}/files/{path...}"
	epDeleteFile = "DELETE /v1/sessions/{id}/files/{path...}"
)

func executorEndpoint(ep string) bool {
	switch ep {
	case epExec, epShell, epPutFile, epGetFile, epDeleteFile, epListFiles:
		return true
	}
	return false
}

// callSlack is what an exec or shell call may take past its own timeout: the
// interpreter's (re)start and an interrupt's grace.
const callSlack = time.Minute

// FileTimeout bounds a file's transfer (PutFile, GetFile) on top of the call's timeout.
const FileTimeout = broker.DefaultUploadTimeout

// runTime is how long the call of a run may take, past the client's own timeout.
func runTime(secs float64) time.Duration {
	if secs <= 0 {
		secs = broker.DefaultExecTimeout
	}
	return time.Duration(secs*float64(time.Second)) + callSlack
}

// Exec runs Python in session's persistent interpreter and returns the result. A cell
// that raised is a result with Status "error", not an error; calls of a session are
// serialised, and one while another runs is an *Error matching broker.ErrBusy.
func (c *Client) Exec(ctx context.Context, session string, req broker.ExecRequest) (broker.ExecResult, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return broker.ExecResult{}, fmt.Errorf("broker: %s: %w", epExec, err)
	}
	var out broker.ExecResult
	err = c.call(ctx, epExec, "/v1/sessions/"+seg(session)+"/exec", nil, "application/json", bytes.NewReader(b), runTime(req.Timeout), &out)
	return out, err
}

// maxEvent bounds one line of an exec stream: a display's data (8 MiB per call) in base64.
const maxEvent = 12 << 20

// ExecStream is Exec with its events as they happen: fn (if not nil) gets each one before
// the result (start, stream, display, restart); the result comes back as Exec's.
func (c *Client) ExecStream(ctx context.Context, session string, req broker.ExecRequest, fn func(broker.ExecEvent)) (broker.ExecResult, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return broker.ExecResult{}, fmt.Errorf("broker: %s: %w", epExec, err)
	}
	var out *broker.ExecResult
	err = c.stream(ctx, epExec, "/v1/sessions/"+seg(session)+"/exec", nil, "application/json", broker.NDJSON, bytes.NewReader(b), runTime(req.Timeout),
		func(resp *http.Response) error {
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 0, 64<<10), maxEvent)
			for sc.Scan() {
				var ev broker.ExecEvent
				if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
					return fmt.Errorf("broker: %s: decoding an event: %w", epExec, err)
				}
				switch ev.Type {
				case broker.EventResult:
					if ev.Result == nil {
						return fmt.Errorf("broker: %s: a result event without a result", epExec)
					}
					out = ev.Result
					return nil
				case "error":
					return fmt.Errorf("broker: %s: run %s failed: %s", epExec, ev.RunID, ev.Reason)
				}
				if fn != nil {
					fn(ev)
				}
			}
			if err := sc.Err(); err != nil {
				return fmt.Errorf("broker: %s: reading the stream: %w", epExec, err)
			}
			return fmt.Errorf("broker: %s: the stream ended without a result", epExec)
		})
	if err != nil {
		return broker.ExecResult{}, err
	}
	return *out, nil
}

// Shell runs command with /bin/sh -c in session's sandbox.
func (c *Client) Shell(ctx context.Context, session string, req broker.ShellRequest) (broker.ShellResult, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return broker.ShellResult{}, fmt.Errorf("broker: %s: %w", epShell, err)
	}
	var out broker.ShellResult
	err = c.call(ctx, epShell, "/v1/sessions/"+seg(session)+"/shell", nil, "application/json", bytes.NewReader(b), runTime(req.Timeout), &out)
	return out, err
}

// Cancel interrupts the run runID (its call then answers "cancelled").
func (c *Client) Cancel(ctx context.Context, runID string) error {
	return c.call(ctx, epCancel, "/v1/runs/"+seg(runID)+"/cancel", nil, "", nil, 0, nil)
}

// Runs lists up to limit (0: the broker's default) of session's recent runs, newest first.
func (c *Client) Runs(ctx context.Context, session string, limit int) ([]broker.RunInfo, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out broker.RunList
	err := c.callJSON(ctx, epRuns, "/v1/sessions/"+seg(session)+"/runs", q, nil, &out)
	return out.Runs, err
}

// filePath is the URL path of a workspace file: its slashes separate segments, the rest
// is escaped by the URL (so "a b#c" is one name). A path the broker would refuse (not
// relative, not clean, with "..") is refused here, wrapping broker.ErrInvalid: the URL
// of one would not even reach the route.
func filePath(session, p string) (string, error) {
	if p == "" || strings.HasPrefix(p, "/") || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("workspace path %q: %w: want a clean path relative to the workspace, without .., e.g. data/in.csv", p, broker.ErrInvalid)
	}
	return "/v1/sessions/" + seg(session) + "/files/" + p, nil
}

// PutFile writes body to p in session's workspace (relative, e.g. "data/in.csv"),
// replacing what was there. A body past the host's cap is an *Error matching
// broker.ErrTooLarge, and nothing is written.
func (c *Client) PutFile(ctx context.Context, session, p string, body io.Reader) (broker.FileInfo, error) {
	fp, err := filePath(session, p)
	if err != nil {
		return broker.FileInfo{}, fmt.Errorf("broker: %s: %w", epPutFile, err)
	}
	var out broker.FileInfo
	err = c.call(ctx, epPutFile, fp, nil, "application/octet-stream", body, FileTimeout, &out)
	return out, err
}

// GetFile copies the file p of session's workspace to dst and returns its size.
func (c *Client) GetFile(ctx context.Context, session, p string, dst io.Writer) (int64, error) {
	fp, err := filePath(session, p)
	if err != nil {
		return 0, fmt.Errorf("broker: %s: %w", epGetFile, err)
	}
	var n int64
	err = c.stream(ctx, epGetFile, fp, nil, "", "application/octet-stream", nil, FileTimeout, func(resp *http.Response) error {
		var err error
		n, err = io.Copy(dst, resp.Body)
		if err != nil {
			return fmt.Errorf("broker: %s: reading %s: %w", epGetFile, p, err)
		}
		if resp.ContentLength >= 0 && n != resp.ContentLength {
			return fmt.Errorf("broker: %s: %s: %d of %d bytes", epGetFile, p, n, resp.ContentLength)
		}
		return nil
	})
	return n, err
}

// ListFiles lists the directory dir of session's workspace ("" is the workspace).
func (c *Client) ListFiles(ctx context.Context, session, dir string) ([]broker.FileInfo, error) {
	q := url.Values{}
	if dir != "" {
		q.Set("dir", dir)
	}
	var out broker.FileList
	err := c.callJSON(ctx, epListFiles, "/v1/sessions/"+seg(session)+"/files", q, nil, &out)
	return out.Files, err
}

// DeleteFile removes the file (or empty directory) p of session's workspace.
func (c *Client) DeleteFile(ctx context.Context, session, p string) error {
	fp, err := filePath(session, p)
	if err != nil {
		return fmt.Errorf("broker: %s: %w", epDeleteFile, err)
	}
	return c.call(ctx, epDeleteFile, fp, nil, "", nil, 0, nil)
}
