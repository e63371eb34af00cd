package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// DefaultTimeout bounds one call (a long poll: its wait plus this).
const DefaultTimeout = 30 * time.Second

// maxAnswer bounds what is read of one answer.
const maxAnswer = 16 << 20

// Client calls one broker with one token. It is safe for concurrent use; WithToken makes
// a client for another token that shares the connections.
type Client struct {
	base    *url.URL
	token   string
	hc      *http.Client
	timeout time.Duration
	observe func(Call)
}

// Call is what an observer learns of one finished call: the route pattern as the broker
// names it (e.g. "GET /v1/requests/{id}"), the status (0 when no answer came) and the
// time from sending to having read the answer.
type Call struct {
	Endpoint string
	Status   int `json:"-"`
	Duration time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends calls through hc (its Timeout should be zero: the client bounds
// each call itself).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTimeout bounds each call (default DefaultTimeout); a long poll gets its wait on top.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithObserver calls fn after every call, for metrics; fn must be safe for concurrent use.
func WithObserver(fn func(Call)) Option { return func(c *Client) { c.observe = fn } }

// New returns a client of the broker at baseURL (http or https, no query) with token,
// which may be "" for the public endpoints.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("broker URL %q: want http(s)://HOST[:PORT][/PATH]", baseURL)
	}
	if u.User != nil {
		return nil, errors.New("broker URL: credentials go in the token, not the URL")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: u, token: token, hc: http.DefaultClient, timeout: DefaultTimeout}
	for _, o := range opts {
		o(c)
	}
	if c.timeout <= 0 {
		return nil, fmt.Errorf("broker client: timeout %s: want > 0", c.timeout)
	}
	return c, nil
}

// WithToken is c calling with another token.
func (c *Client) WithToken(token string) *Client {
	d := *c
	d.token = token
	return &d
}

// Error is an answer other than 2xx.
type Error struct {
	Method   string `json:"-"`
	Endpoint string `json:"-"` // the route pattern, e.g. "POST /v1/requests/{id}/approve"
	Status   int    `json:"-"`
	Message  string `json:"error"`
	Hint     string `json:"hint"`
	// RetryAfter is the Retry-After of a 503 (or 429), zero when there was none.
	RetryAfter time.Duration `json:"-"`
}

func (e *Error) Error() string {
	s := fmt.Sprintf("broker: %s: %d %s", e.Endpoint, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// Is matches the broker's sentinels by status: 404 ErrNotFound, 409 ErrConflict (and
// ErrBusy from a session's exec, shell or files), 413 ErrTooLarge, 400 ErrInvalid, 503
// ErrUnavailable.
func (e *Error) Is(target error) bool {
	switch target {
	case broker.ErrNotFound:
		return e.Status == http.StatusNotFound
	case broker.ErrConflict:
		return e.Status == http.StatusConflict
	case broker.ErrInvalid:
		return e.Status == http.StatusBadRequest
	case broker.ErrUnavailable:
		return e.Status == http.StatusServiceUnavailable
	case broker.ErrBusy:
		return e.Status == http.StatusConflict && executorEndpoint(e.Endpoint)
	case broker.ErrTooLarge:
		return e.Status == http.StatusRequestEntityTooLarge
	}
	return false
}

// call is one exchange: method on path (with query), body sent as ctype, the answer
// decoded into out unless it is nil. endpoint names the route for errors and observers.
func (c *Client) call(ctx context.Context, endpoint, path string, q url.Values, ctype string, body io.Reader, extra time.Duration, out any) error {
	return c.stream(ctx, endpoint, path, q, ctype, "application/json", body, extra, func(resp *http.Response) error {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
		if err != nil {
			return fmt.Errorf("broker: %s: reading the answer: %w", endpoint, err)
		}
		if len(b) > maxAnswer {
			return fmt.Errorf("broker: %s: answer larger than %d bytes", endpoint, maxAnswer)
		}
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				return fmt.Errorf("broker: %s: decoding the answer: %w", endpoint, err)
			}
		}
		return nil
	})
}

// stream is call with the answer read by read, as it comes, while the call's deadline
// holds: read gets every 2xx answer; any other is an *Error.
func (c *Client) stream(ctx context.Context, endpoint, path string, q url.Values, ctype, accept string, body io.Reader, extra time.Duration, read func(*http.Response) error) error {
	method, _, _ := strings.Cut(endpoint, " ")
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(ctx, c.timeout+extra)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return fmt.Errorf("broker: %s: %w", endpoint, err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Accept", accept)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if h, ok := ctx.Value(headerKey{}).([2]string); ok {
		req.Header.Set(h[0], h[1])
	}
	start := time.Now()
	status := 0
	defer func() {
		if c.observe != nil {
			c.observe(Call{Endpoint: endpoint, Status: status, Duration: time.Since(start)})
		}
	}()
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("broker: %s: %w", endpoint, err) // url.Error names the URL, which holds no secret
	}
	defer resp.Body.Close()
	status = resp.StatusCode
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
		if err != nil {
			return fmt.Errorf("broker: %s: %d: reading the answer: %w", endpoint, resp.StatusCode, err)
		}
		e := &Error{Method: method, Endpoint: endpoint, Status: resp.StatusCode}
		if json.Unmarshal(b, e) != nil || e.Message == "" {
			e.Message = strings.TrimSpace(string(bytes.ToValidUTF8(b[:min(len(b), 512)], nil)))
		}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
			e.RetryAfter = time.Duration(s) * time.Second
		}
		return e
	}
	return read(resp)
}

// callJSON sends in (nil: no body) as JSON.
func (c *Client) callJSON(ctx context.Context, endpoint, path string, q url.Values, in, out any) error {
	if in == nil {
		return c.call(ctx, endpoint, path, q, "", nil, 0, out)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("broker: %s: %w", endpoint, err)
	}
	return c.call(ctx, endpoint, path, q, "application/json", bytes.NewReader(b), 0, out)
}

// headerKey carries one extra request header through a call's context (withHeader).
type headerKey struct{}

// withHeader makes the call under ctx send header name: value.
func withHeader(ctx context.Context, name, value string) context.Context {
	return context.WithValue(ctx, headerKey{}, [2]string{name, value})
}

// seg escapes one path segment (an ID).
func seg(id string) string { return url.PathEscape(id) }
