package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/url"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// NewSession says what a session is created on; every field may be empty (the broker then
// gives the deployment's current interpreter and base, and the caller as owner).
type NewSession struct {
	Owner       string          `json:"owner,omitempty"` // admins only
	Interpreter string          `json:"interpreter,omitempty"`
	Base        string          `json:"base,omitempty"`
	BaseLock    json.RawMessage `json:"base_lock,omitempty"`
}

// CreateSession creates a session (owner or admin token); the answer's AgentToken is
// shown only here.
func (c *Client) CreateSession(ctx context.Context, s NewSession) (broker.CreatedSession, error) {
	var out broker.CreatedSession
	err := c.callJSON(ctx, "POST /v1/sessions", "/v1/sessions", nil, s, &out)
	return out, err
}

// Sessions lists the sessions the token may see.
func (c *Client) Sessions(ctx context.Context) ([]broker.Session, error) {
	var out struct{ Sessions []broker.Session }
	err := c.callJSON(ctx, "GET /v1/sessions", "/v1/sessions", nil, nil, &out)
	return out.Sessions, err
}

// Env is what session id is bound to, with its open requests.
func (c *Client) Env(ctx context.Context, id string) (broker.Env, error) {
	var out broker.Env
	err := c.callJSON(ctx, "GET /v1/sessions/{id}/env", "/v1/sessions/"+seg(id)+"/env", nil, nil, &out)
	return out, err
}

// Ask files a request of session for packages (requirements as pip writes them).
func (c *Client) Ask(ctx context.Context, session string, packages ...string) (broker.Request, error) {
	var out broker.Request
	err := c.callJSON(ctx, "POST /v1/sessions/{id}/requests", "/v1/sessions/"+seg(session)+"/requests", nil,
		map[string][]string{"packages": packages}, &out)
	return out, err
}

// Upload files a request of session for a wheel of its own, sent as filename.
func (c *Client) Upload(ctx context.Context, session, filename string, wheel io.Reader) (broker.Request, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("wheel", filename)
	if err == nil {
		_, err = io.Copy(fw, wheel)
	}
	if err == nil {
		err = mw.Close()
	}
	if err != nil {
		return broker.Request{}, fmt.Errorf("uploading %s: %w", filename, err)
	}
	var out broker.Request
	err = c.call(ctx, "POST /v1/sessions/{id}/requests", "/v1/sessions/"+seg(session)+"/requests", nil,
		mw.FormDataContentType(), &body, 0, &out)
	return out, err
}

// Request reads request id as it is now.
func (c *Client) Request(ctx context.Context, id string) (broker.Request, error) {
	return c.Poll(ctx, id, 0)
}

// Poll reads request id, waiting up to wait (at most broker.MaxWait) for it to become
// terminal; it answers with the request as it is when the wait ends.
func (c *Client) Poll(ctx context.Context, id string, wait time.Duration) (broker.Request, error) {
	var q url.Values
	if wait > 0 {
		q = url.Values{"wait": {wait.String()}}
	}
	var out broker.Request
	err := c.call(ctx, "GET /v1/requests/{id}", "/v1/requests/"+seg(id), q, "", nil, wait, &out)
	return out, err
}

// Wait long-polls request id until it is terminal or ctx ends (then ctx's error, with the
// request as last read).
func (c *Client) Wait(ctx context.Context, id string) (broker.Request, error) {
	for {
		r, err := c.Poll(ctx, id, broker.MaxWait/2)
		if err != nil || broker.Terminal(r.State) {
			return r, err
		}
		if err := ctx.Err(); err != nil {
			return r, fmt.Errorf("waiting for request %s (still %s): %w", id, r.State, err)
		}
	}
}

// Filter selects requests; empty fields match everything the token may see.
type Filter struct {
	Session string
	State   broker.State
}

// Requests lists requests (owner or admin token).
func (c *Client) Requests(ctx context.Context, f Filter) ([]broker.Request, error) {
	q := url.Values{}
	if f.Session != "" {
		q.Set("session", f.Session)
	}
	if f.State != "" {
		q.Set("state", string(f.State))
	}
	var out struct{ Requests []broker.Request }
	err := c.callJSON(ctx, "GET /v1/requests", "/v1/requests", q, nil, &out)
	return out.Requests, err
}

// Approve approves pending request id, as an isolated layer replacing the base if
// isolated (the request must offer one).
func (c *Client) Approve(ctx context.Context, id string, isolated bool) (broker.Request, error) {
	var out broker.Request
	err := c.callJSON(ctx, "POST /v1/requests/{id}/approve", "/v1/requests/"+seg(id)+"/approve", nil,
		map[string]bool{"isolated": isolated}, &out)
	return out, err
}

// Deny denies pending request id; the agent sees reason.
func (c *Client) Deny(ctx context.Context, id, reason string) (broker.Request, error) {
	var out broker.Request
	err := c.callJSON(ctx, "POST /v1/requests/{id}/deny", "/v1/requests/"+seg(id)+"/deny", nil,
		map[string]string{"reason": reason}, &out)
	return out, err
}

// Rebase moves session id to the current interpreter and base.
func (c *Client) Rebase(ctx context.Context, id string) (broker.Session, error) {
	var out broker.Session
	err := c.callJSON(ctx, "POST /v1/sessions/{id}/rebase", "/v1/sessions/"+seg(id)+"/rebase", nil, nil, &out)
	return out, err
}

// Layers lists the layers the deployment knows.
func (c *Client) Layers(ctx context.Context) ([]broker.Layer, error) {
	var out struct{ Layers []broker.Layer }
	err := c.callJSON(ctx, "GET /v1/layers", "/v1/layers", nil, nil, &out)
	return out.Layers, err
}

// GC collects layers no binding holds and uploads no request holds (admin token).
func (c *Client) GC(ctx context.Context) (broker.GCReport, error) {
	var out broker.GCReport
	err := c.callJSON(ctx, "POST /v1/gc", "/v1/gc", nil, nil, &out)
	return out, err
}

// Audit returns the audit events of session, or all the token may see for "".
func (c *Client) Audit(ctx context.Context, session string) ([]broker.AuditEvent, error) {
	var q url.Values
	if session != "" {
		q = url.Values{"session": {session}}
	}
	var out struct{ Events []broker.AuditEvent }
	err := c.callJSON(ctx, "GET /v1/audit", "/v1/audit", q, nil, &out)
	return out.Events, err
}
