package registry

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/pylayer/pylayer/oci/digest"
)

// Options configure a Repo opened with Open. The zero value is ready to use.
type Options struct {
	// CAFile is a PEM file of extra root certificates trusted for TLS (--ca-file).
	CAFile string
	// Insecure lists registries that may be reached over plain HTTP or TLS without
	// certificate verification (--insecure-registry): "host", "host:port" or a CIDR.
	// Loopback hosts (127.0.0.0/8, ::1, localhost) may use plain HTTP without being
	// listed, but their certificates are still verified when they speak TLS.
	Insecure []string
	// Keychain finds credentials; default authn.DefaultKeychain ($DOCKER_CONFIG/config.json,
	// ~/.docker/config.json, credential helpers).
	Keychain authn.Keychain
	// Jobs is the number of blobs transferred at once by Push and Copy; default 4.
	Jobs int
	// Retries is the number of attempts of a request or blob upload that fails with a
	// transient error (5xx, 429, timeout, refused or reset connection); default 5.
	Retries int
	// RetryDelay is the first backoff; it doubles on each retry, with jitter. Default 200ms.
	RetryDelay time.Duration
	// MountFrom names another repository on the same registry ("team/other" or
	// "HOST/team/other") whose blobs are mounted instead of uploaded when it has them.
	MountFrom string
	// Progress, when set, receives events; calls are serialized.
	Progress func(Event)
	// Transport is the HTTP transport under retries and auth (tests); default a clone of
	// http.DefaultTransport with CAFile and Insecure applied.
	Transport http.RoundTripper
	// UserAgent is sent with every request; default "pylayer".
	UserAgent string
}

// EventKind says what an Event reports.
type EventKind int

// Event kinds.
const (
	BlobExists     EventKind = iota // the repository already had the blob
	BlobMounted                     // the blob was mounted from Options.MountFrom
	BlobUploading                   // an upload starts (Attempt counts from 1)
	BlobUploaded                    // the blob was uploaded
	Retrying                        // a transient failure (Err); the next attempt follows after a pause
	ManifestPushed                  // a manifest was stored (Tag may be "")
)

func (k EventKind) String() string {
	switch k {
	case BlobExists:
		return "exists"
	case BlobMounted:
		return "mounted"
	case BlobUploading:
		return "uploading"
	case BlobUploaded:
		return "uploaded"
	case Retrying:
		return "retrying"
	case ManifestPushed:
		return "manifest pushed"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one step of a transfer, for progress displays and logs.
type Event struct {
	Kind    EventKind
	Repo    string // Repo.Name()
	Digest  digest.Digest
	Size    int64
	Tag     string // ManifestPushed
	Attempt int    // BlobUploading, Retrying
	Err     error  // Retrying: the failure being retried
}

const (
	defaultJobs       = 4
	defaultRetries    = 5
	defaultRetryDelay = 200 * time.Millisecond
	maxRetryDelay     = 10 * time.Second
)

// withDefaults fills in defaults and rejects values that make no sense.
func (o Options) withDefaults() (Options, error) {
	if o.Jobs < 0 || o.Retries < 0 || o.RetryDelay < 0 {
		return o, fmt.Errorf("options: Jobs (%d), Retries (%d) and RetryDelay (%s) must not be negative", o.Jobs, o.Retries, o.RetryDelay)
	}
	if o.Jobs == 0 {
		o.Jobs = defaultJobs
	}
	if o.Retries == 0 {
		o.Retries = defaultRetries
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = defaultRetryDelay
	}
	if o.Keychain == nil {
		o.Keychain = authn.DefaultKeychain
	}
	if o.UserAgent == "" {
		o.UserAgent = "pylayer"
	}
	for _, h := range o.Insecure {
		if err := checkInsecureEntry(h); err != nil {
			return o, err
		}
	}
	return o, nil
}

// notifier serializes calls of a progress hook.
type notifier struct {
	mu   sync.Mutex
	fn   func(Event)
	repo string
}

func (n *notifier) emit(e Event) {
	if n == nil || n.fn == nil {
		return
	}
	e.Repo = n.repo
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fn(e)
}

// backoff waits before attempt+1: delay * 2^(attempt-1), capped, with ±25% jitter.
func backoff(ctx context.Context, delay time.Duration, attempt int) error {
	d := delay << min(attempt-1, 16)
	if d <= 0 || d > maxRetryDelay {
		d = maxRetryDelay
	}
	d += time.Duration(float64(d) * (jitter() - 0.5) / 2)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// PlainHTTPAllowed reports whether host[:port] may be reached over plain HTTP: loopback
// addresses and "localhost" always, anything else only when insecure lists it (as host,
// host:port or a CIDR containing its address).
func PlainHTTPAllowed(hostport string, insecure []string) bool {
	return isLoopback(hostport) || SkipTLSVerify(hostport, insecure)
}

// SkipTLSVerify reports whether the TLS certificate of host[:port] goes unverified: only
// when insecure lists it. Loopback hosts are verified like any other.
func SkipTLSVerify(hostport string, insecure []string) bool {
	host := hostOnly(hostport)
	ip := net.ParseIP(host)
	for _, e := range insecure {
		e = strings.ToLower(e)
		switch {
		case strings.Contains(e, "/"):
			if _, n, err := net.ParseCIDR(e); err == nil && ip != nil && n.Contains(ip) {
				return true
			}
		case strings.EqualFold(e, hostport):
			return true
		case hostOnly(e) == e && strings.EqualFold(e, host): // a host entry matches every port
			return true
		}
	}
	return false
}

func isLoopback(hostport string) bool {
	host := hostOnly(hostport)
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hostOnly strips the port and IPv6 brackets: "[::1]:5000" -> "::1", "a.b:80" -> "a.b".
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

func checkInsecureEntry(e string) error {
	if strings.Contains(e, "/") {
		if _, _, err := net.ParseCIDR(e); err != nil {
			return fmt.Errorf("insecure registry %q: not a host, host:port or CIDR: %v", e, err)
		}
		return nil
	}
	if e == "" || strings.ContainsAny(e, " \t@") {
		return fmt.Errorf("insecure registry %q: not a host, host:port or CIDR", e)
	}
	return nil
}
