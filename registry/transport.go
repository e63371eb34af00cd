package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// ErrPlainHTTP: plain HTTP to a host that is neither loopback nor listed as insecure.
var ErrPlainHTTP = errors.New("plain HTTP refused")

func jitter() float64 { return rand.Float64() }

// baseTransport is the HTTP stack under auth: the TLS policy, the plain-HTTP policy, and
// retries of transient failures.
func baseTransport(o Options) (http.RoundTripper, error) {
	inner := o.Transport
	if inner == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		tc, err := tlsConfig(o.CAFile)
		if err != nil {
			return nil, err
		}
		t.TLSClientConfig = tc
		if len(o.Insecure) > 0 {
			t.DialTLSContext = dialTLS(tc, o.Insecure)
		}
		t.ResponseHeaderTimeout = 2 * time.Minute
		inner = t
	} else if o.CAFile != "" {
		return nil, errors.New("options: CAFile cannot be combined with a custom Transport")
	}
	rt := &retryTransport{inner: inner, attempts: o.Retries, delay: o.RetryDelay}
	return transport.NewUserAgent(&policyTransport{insecure: o.Insecure, inner: rt}, o.UserAgent), nil
}

// tlsConfig trusts the system roots plus caFile. Without caFile, RootCAs stays nil: crypto/tls
// then verifies against the same system roots, loaded on the first TLS handshake instead of
// parsing every certificate of /etc/ssl at start-up (tens of milliseconds) for a loopback or
// plain-HTTP registry that needs none.
func tlsConfig(caFile string) (*tls.Config, error) {
	if caFile == "" {
		return &tls.Config{MinVersion: tls.VersionTLS12}, nil
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading CA file: %w", err)
	}
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %q holds no PEM certificate", caFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}, nil
}

// dialTLS skips certificate verification only for connections to a host:port that insecure
// lists (so a token server or blob storage such a registry redirects to is still verified).
// Connections through an HTTPS proxy do not use it and are always verified.
func dialTLS(base *tls.Config, insecure []string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := base.Clone()
		cfg.ServerName = hostOnly(addr)
		cfg.NextProtos = []string{"http/1.1"}
		cfg.InsecureSkipVerify = SkipTLSVerify(addr, insecure)
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		return tc, nil
	}
}

// policyTransport refuses plain HTTP to hosts that are not allowed it, on every request
// (registry, token server and redirects alike).
type policyTransport struct {
	insecure []string
	inner    http.RoundTripper
}

func (p *policyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !PlainHTTPAllowed(req.URL.Host, p.insecure) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, &plainHTTPError{host: req.URL.Host}
	}
	return p.inner.RoundTrip(req)
}

type plainHTTPError struct{ host string }

func (e *plainHTTPError) Error() string {
	return fmt.Sprintf("%v to %s: it is not a loopback address; if that registry really has no TLS, pass --insecure-registry %s", ErrPlainHTTP, e.host, e.host)
}

func (e *plainHTTPError) Unwrap() error { return ErrPlainHTTP }

// retryTransport retries requests it can replay (no body, or GetBody set) on transient
// failures: 5xx except 501, 429, 408, timeouts, refused and reset connections. When the
// host never answered, the error says so in words a user can act on (unreachableError).
type retryTransport struct {
	inner    http.RoundTripper
	attempts int
	delay    time.Duration
}

// unreachableError: every attempt failed before the host answered.
type unreachableError struct {
	host     string
	reason   string
	attempts int
	err      error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("%s is not answering (%s) after %d attempts", e.host, e.reason, e.attempts)
}

func (e *unreachableError) Unwrap() error { return e.err }

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	for attempt := 1; ; attempt++ {
		if attempt > 1 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
		resp, err := t.inner.RoundTrip(req)
		last := !replayable || attempt >= t.attempts || req.Context().Err() != nil
		switch {
		case err != nil && (last || !transientNetError(err)):
			if replayable && transientNetError(err) {
				return nil, &unreachableError{host: req.URL.Host, reason: netReason(err), attempts: attempt, err: err}
			}
			return nil, err
		case err == nil && (last || !transientStatus(resp.StatusCode)):
			return resp, nil
		case err == nil:
			wait := retryAfter(resp)
			drain(resp.Body)
			if wait > 0 {
				if err := sleep(req.Context(), wait); err != nil {
					return nil, err
				}
				continue
			}
		}
		if err := backoff(req.Context(), t.delay, attempt); err != nil {
			return nil, err
		}
	}
}

func transientStatus(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusRequestTimeout ||
		code >= 500 && code != http.StatusNotImplemented && code != http.StatusHTTPVersionNotSupported
}

// transientNetError: the connection failed in a way that another attempt may not.
func transientNetError(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		return false
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.IsTimeout || dnsErr.IsTemporary
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func netReason(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to host"
	case isTimeout(err):
		return "timed out"
	}
	return "connection closed"
}

// retryAfter honours a Retry-After of up to a minute given in seconds.
func retryAfter(resp *http.Response) time.Duration {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return 0
	}
	n, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || n <= 0 || n > 60 {
		return 0
	}
	return time.Duration(n) * time.Second
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// drain reads a little of a discarded body so the connection can be reused, then closes it.
func drain(body io.ReadCloser) {
	io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	body.Close()
}
