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

// Sessions lists every session the token may see, a page at a time.
func (c *Client) Sessions(ctx context.Context) ([]broker.Session, error) {
	return all(ctx, func(ctx context.Context, p Page) ([]broker.Session, string, error) {
		return c.SessionsPage(ctx, "", p)
	})
}

// SessionsPage lists one page of the sessions of owner ("": all the token may see).
func (c *Client) SessionsPage(ctx context.Context, owner string, p Page) ([]broker.Session, string, error) {
	q := p.query()
	if owner != "" {
		q.Set("owner", owner)
	}
	var out struct {
		Sessions   []broker.Session
		NextCursor string `json:"next_cursor"`
	}
	err := c.callJSON(ctx, "GET /v1/sessions", "/v1/sessions", q, nil, &out)
	return out.Sessions, out.NextCursor, err
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

// AskAsync is Ask for a client that long-polls its request anyway (Wait): it prefers an
// asynchronous answer (Prefer: respond-async), so the broker answers at once, with the
// request classifying unless it knew the classification already, instead of after
// resolving it against the index.
func (c *Client) AskAsync(ctx context.Context, session string, packages ...string) (broker.Request, error) {
	return c.Ask(withHeader(ctx, "Prefer", "respond-async"), session, packages...)
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

// Filter selects requests or audit events; empty fields match everything the token may
// see. State and UpdatedSince apply to requests, Action to audit events.
type Filter struct {
	Session      string
	State        broker.State
	Owner        string // admins only; an owner may name only themselves
	Action       string
	UpdatedSince time.Time // requests changed at or after it
}

func (f Filter) set(q url.Values) {
	for k, v := range map[string]string{"session": f.Session, "state": string(f.State), "owner": f.Owner, "action": f.Action} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !f.UpdatedSince.IsZero() {
		q.Set("updated_since", f.UpdatedSince.Format(time.RFC3339Nano))
	}
}

// Page asks for one page of a list: Limit rows (0: the broker's default, at most
// broker.MaxPageLimit) after Cursor (the next_cursor of the page before, "" for the
// first), newest first with Desc, created (events: timed) in [Since, Until).
type Page struct {
	Limit        int
	Cursor       string
	Desc         bool
	Since, Until time.Time
}

func (p Page) query() url.Values {
	q := url.Values{}
	if p.Limit > 0 {
		q.Set("limit", fmt.Sprint(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	if p.Desc {
		q.Set("order", "desc")
	}
	if !p.Since.IsZero() {
		q.Set("since", p.Since.Format(time.RFC3339Nano))
	}
	if !p.Until.IsZero() {
		q.Set("until", p.Until.Format(time.RFC3339Nano))
	}
	return q
}

// all reads every page of a list, the largest pages the broker gives.
func all[T any](ctx context.Context, page func(context.Context, Page) ([]T, string, error)) ([]T, error) {
	var out []T
	p := Page{Limit: broker.MaxPageLimit}
	for {
		l, next, err := page(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, l...)
		if next == "" {
			return out, nil
		}
		p.Cursor = next
	}
}

// Requests lists every request f selects (owner or admin token), a page at a time.
func (c *Client) Requests(ctx context.Context, f Filter) ([]broker.Request, error) {
	return all(ctx, func(ctx context.Context, p Page) ([]broker.Request, string, error) { return c.RequestsPage(ctx, f, p) })
}

// RequestsPage lists one page of the requests f selects.
func (c *Client) RequestsPage(ctx context.Context, f Filter, p Page) ([]broker.Request, string, error) {
	q := p.query()
	f.set(q)
	var out struct {
		Requests   []broker.Request
		NextCursor string `json:"next_cursor"`
	}
	err := c.callJSON(ctx, "GET /v1/requests", "/v1/requests", q, nil, &out)
	return out.Requests, out.NextCursor, err
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

// Audit returns the audit events of session, or all the token may see for "", a page at
// a time. For a large log prefer AuditPage, or GET /v1/audit/export.
func (c *Client) Audit(ctx context.Context, session string) ([]broker.AuditEvent, error) {
	return all(ctx, func(ctx context.Context, p Page) ([]broker.AuditEvent, string, error) {
		return c.AuditPage(ctx, Filter{Session: session}, p)
	})
}

// AuditPage returns one page of the audit events f selects (Session, Owner, Action).
func (c *Client) AuditPage(ctx context.Context, f Filter, p Page) ([]broker.AuditEvent, string, error) {
	q := p.query()
	f.set(q)
	var out struct {
		Events     []broker.AuditEvent
		NextCursor string `json:"next_cursor"`
	}
	err := c.callJSON(ctx, "GET /v1/audit", "/v1/audit", q, nil, &out)
	return out.Events, out.NextCursor, err
}
