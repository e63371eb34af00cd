package index

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

const (
	mediaJSON     = "application/vnd.pypi.simple.v1+json"
	mediaHTML     = "application/vnd.pypi.simple.v1+html"
	mediaTextHTML = "text/html"
	acceptHeader  = mediaJSON + ", " + mediaHTML + ";q=0.2, " + mediaTextHTML + ";q=0.01"
)

// HTTPError is an unexpected HTTP status from the index or a file host. Its
// URL never carries credentials.
type HTTPError struct {
	StatusCode int
	Status     string
	URL        string
}

func (e *HTTPError) Error() string {
	msg := fmt.Sprintf("GET %s: %s", e.URL, e.Status)
	switch e.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		msg += " (check the index credentials: URL userinfo or netrc)"
	}
	return msg
}

// Client reads one package index.
type Client struct {
	base     *url.URL // index URL without userinfo, path ending in "/"
	redacted string
	http     *http.Client
	opts     *options
	cache    *metadataCache // nil: none
	sizes    sync.Map       // file URL + "#" + sha256 -> int64: sizes the metadata reads found (SizeOf)
}

// New returns a client for the index at indexURL, e.g.
// "https://user:pass@host/simple" or "http://127.0.0.1:8080/simple/".
func New(indexURL string, opts ...Option) (*Client, error) {
	o, err := makeOptions(opts...)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(indexURL)
	if err != nil {
		// url errors quote the input, which may hold a password
		return nil, errors.New("parsing index URL: invalid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("index URL %s: want an absolute http or https URL", redactURL(u))
	}
	if u.Fragment != "" || u.RawQuery != "" {
		return nil, fmt.Errorf("index URL %s: must not have a query or fragment", redactURL(u))
	}
	entries, err := readNetrc(o.netrcPath, o.netrcSet)
	if err != nil {
		return nil, err
	}
	cred := credentialFor(u, entries)
	base := *u
	base.User = nil
	if !strings.HasSuffix(base.Path, "/") {
		base.Path += "/"
		if base.RawPath != "" {
			base.RawPath += "/"
		}
	}
	hc := *o.httpClient
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	hc.Transport = &authTransport{base: rt, origin: origin(&base), cred: cred, ua: o.userAgent}
	c := &Client{base: &base, redacted: base.String(), http: &hc, opts: o}
	if o.metaCache != "" {
		c.cache = &metadataCache{dir: o.metaCache, limit: o.maxBodyBytes}
	}
	return c, nil
}

// Redacted returns the index URL with any credentials removed.
func (c *Client) Redacted() string { return c.redacted }

func redactURL(u *url.URL) string {
	v := *u
	v.User = nil
	return v.String()
}

// Files lists the files of project (any spelling; it is normalized).
// A project the index does not know yields an error wrapping ErrNotFound.
func (c *Client) Files(ctx context.Context, project string) ([]File, error) {
	if err := checkName(project); err != nil {
		return nil, err
	}
	norm := Normalize(project)
	pageURL := c.base.JoinPath(norm)
	pageURL.Path += "/"
	resp, err := c.get(ctx, pageURL.String(), acceptHeader)
	if err != nil {
		return nil, fmt.Errorf("listing %s on %s: %w", norm, c.redacted, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("%w: %s (index %s)", ErrNotFound, norm, c.redacted)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("listing %s: %w", norm, httpError(resp))
	}
	final := redactURL(resp.Request.URL)
	ct := resp.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil && ct != "" {
		return nil, fmt.Errorf("listing %s: page %s has invalid Content-Type %q", norm, final, ct)
	}
	mt = strings.ToLower(mt)
	body, err := readCapped(resp.Body, c.opts.maxBodyBytes)
	if err != nil {
		return nil, fmt.Errorf("listing %s: reading %s: %w", norm, final, err)
	}
	switch mt {
	case mediaJSON:
		files, err := parseJSON(resp.Request.URL, norm, body)
		if err != nil {
			return nil, fmt.Errorf("listing %s: parsing JSON page %s: %w", norm, final, err)
		}
		return files, nil
	case mediaHTML, mediaTextHTML:
		return parseHTML(resp.Request.URL, norm, body), nil
	default:
		return nil, fmt.Errorf("listing %s: page %s has Content-Type %q, want %s or HTML: is %s a simple index?", norm, final, ct, mediaJSON, c.redacted)
	}
}

// get issues a GET for rawURL; credentials are added by the transport for
// the index origin only.
func (c *Client) get(ctx context.Context, rawURL, accept string) (*http.Response, error) {
	return c.getWith(ctx, rawURL, func(h http.Header) {
		if accept != "" {
			h.Set("Accept", accept)
		}
	})
}

// getWith is get with the request's headers set by hdr.
func (c *Client) getWith(ctx context.Context, rawURL string, hdr func(http.Header)) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	hdr(req.Header)
	req.Header.Set("User-Agent", c.opts.userAgent)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, scrubURLError(err)
	}
	return resp, nil
}

// scrubURLError removes userinfo from the URL that net/http puts into its
// errors (a redirect Location could carry one).
func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			return &url.Error{Op: ue.Op, URL: redactURL(u), Err: ue.Err}
		}
		return &url.Error{Op: ue.Op, URL: "[unparsable URL]", Err: ue.Err}
	}
	return err
}

func httpError(resp *http.Response) error {
	return &HTTPError{StatusCode: resp.StatusCode, Status: resp.Status, URL: redactURL(resp.Request.URL)}
}

// errTooLarge reports a body over the configured cap.
var errTooLarge = errors.New("response too large")

func readCapped(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: over %d bytes (raise WithMaxBodyBytes)", errTooLarge, limit)
	}
	return b, nil
}
