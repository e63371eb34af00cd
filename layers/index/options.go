package index

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
)

const (
	defaultMaxBodyBytes = 64 << 20 // index pages and metadata files
	defaultMaxFileBytes = 4 << 30  // distribution files
	defaultUserAgent    = "pylayer-index/1"
)

// Option configures a Client.
type Option func(*options) error

type options struct {
	httpClient   *http.Client
	netrcPath    string
	netrcSet     bool
	userAgent    string
	maxBodyBytes int64
	maxFileBytes int64
	metaCache    string
}

// WithNetrc reads credentials for the index host from the netrc file at
// path. The default is $NETRC, else ~/.netrc, and a missing default file is
// not an error; an explicit path must exist. An empty path disables netrc.
func WithNetrc(path string) Option {
	return func(o *options) error {
		o.netrcPath, o.netrcSet = path, true
		return nil
	}
}

// WithMaxBodyBytes caps the size of index pages and metadata files
// (default 64 MiB).
func WithMaxBodyBytes(n int64) Option {
	return func(o *options) error {
		if n <= 0 {
			return fmt.Errorf("WithMaxBodyBytes: %d is not positive", n)
		}
		o.maxBodyBytes = n
		return nil
	}
}

// WithMetadataCache keeps the core metadata the client reads in dir, by the
// sha256 of the file it belongs to, and reads it from there the next time any
// index lists that file. "" (the default) keeps nothing.
func WithMetadataCache(dir string) Option {
	return func(o *options) error {
		o.metaCache = dir
		return nil
	}
}

// makeOptions applies opts over the defaults.
func makeOptions(opts ...Option) (*options, error) {
	o := &options{
		httpClient:   http.DefaultClient,
		userAgent:    defaultUserAgent,
		maxBodyBytes: defaultMaxBodyBytes,
		maxFileBytes: defaultMaxFileBytes,
	}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	if !o.netrcSet {
		o.netrcPath = defaultNetrcPath()
	}
	return o, nil
}

// defaultNetrcPath returns $NETRC or ~/.netrc ("" when neither is known).
func defaultNetrcPath() string {
	if p := os.Getenv("NETRC"); p != "" {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".netrc")
}
