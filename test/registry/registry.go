package registrytest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/internal/testenv"
	"github.com/pylayer/pylayer/oci/digest"
	"golang.org/x/crypto/bcrypt"
)

// Options chooses how the registry is served. The zero value is the production-like
// setup: TLS with a generated CA and htpasswd basic auth.
type Options struct {
	// NoTLS serves plain HTTP instead of TLS.
	NoTLS bool
	// NoAuth turns htpasswd authentication off: anyone may push and pull.
	NoAuth bool
	// HTTP2 lets TLS clients negotiate HTTP/2. Off by default because distribution 2.8
	// then sometimes logs http.response.written=0 for blob GETs that did send their bytes,
	// which would make Request.Written, BytesServed and byte-count assertions wrong.
	HTTP2 bool
	// Listen is the address ("IP:PORT") to listen on instead of a free port on 127.0.0.1,
	// e.g. an address inside a network namespace; the TLS certificate then names its IP
	// too. Host is this address.
	Listen string
	// Wrap runs the registry under a command prefix, e.g. {"nsenter", "--net=/run/netns/NS"}
	// to start it in a network namespace; the prefix must exec the registry (keeping its pid).
	Wrap []string
}

// Registry is a running docker-registry (distribution 2.8) on 127.0.0.1 (or Options.Listen).
type Registry struct {
	Host         string // "127.0.0.1:PORT", or Options.Listen
	CAFile       string // PEM of the generated CA ("" with NoTLS)
	User         string // htpasswd user ("" with NoAuth)
	Password     string
	DockerConfig string // a directory holding config.json with the credentials, for DOCKER_CONFIG
	Storage      string // the filesystem storage root; tests may tamper with blobs here

	opts    Options
	dir     string
	pki     *pki
	proc    *process
	logPath string
	tb      testing.TB // for Requests and friends, which have no error result; nil from New

	mu       sync.Mutex // guards the fields below
	logOff   int64      // ResetLog's mark in the log file
	syncN    int        // sentinel counter for the log barrier
	cfgHosts []string   // hosts whose credentials DockerConfig holds
}

// Start runs a registry for the test and stops it (and removes its storage) at cleanup.
// Debian's docker-registry must be installed (`make deps`); a test that starts one is in the
// integration tier.
func Start(t testing.TB, opts Options) *Registry {
	t.Helper()
	testenv.Integration(t, "Debian's docker-registry")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	r, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("starting docker-registry: %v", err)
	}
	r.tb = t
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("docker-registry log (tail):\n%s", r.logTail(40))
		}
		if err := r.Close(); err != nil {
			t.Errorf("stopping docker-registry: %v", err)
		}
	})
	return r
}

// New runs a registry outside of a test (e.g. from TestMain); the caller must Close it.
func New(ctx context.Context, opts Options) (_ *Registry, err error) {
	if err := ensureInstalled(ctx); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pylayer-registry-")
	if err != nil {
		return nil, fmt.Errorf("creating registry directory: %w", err)
	}
	r := &Registry{
		opts:         opts,
		dir:          dir,
		Storage:      filepath.Join(dir, "storage"),
		DockerConfig: filepath.Join(dir, "docker"),
		logPath:      filepath.Join(dir, "registry.log"),
	}
	defer func() {
		if err != nil {
			_ = r.Close()
		}
	}()
	for _, d := range []string{r.Storage, r.DockerConfig} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	var ips []net.IP
	if opts.Listen != "" {
		h, _, err := net.SplitHostPort(opts.Listen)
		ip := net.ParseIP(h)
		if err != nil || ip == nil {
			return nil, fmt.Errorf("Options.Listen %q: want IP:PORT", opts.Listen)
		}
		ips = append(ips, ip)
	}
	if !opts.NoTLS {
		if r.pki, err = newPKI(dir, ips...); err != nil {
			return nil, err
		}
		r.CAFile = r.pki.caFile
	}
	if !opts.NoAuth {
		r.User, r.Password = "pylayer", randomHex(16)
		// bcrypt.MinCost: distribution checks the password on every request, and at the
		// default cost that alone would add tens of milliseconds to each one.
		hash, err := bcrypt.GenerateFromPassword([]byte(r.Password), bcrypt.MinCost)
		if err != nil {
			return nil, fmt.Errorf("hashing the htpasswd password: %w", err)
		}
		line := r.User + ":" + string(hash) + "\n"
		if err := os.WriteFile(filepath.Join(dir, "htpasswd"), []byte(line), 0o600); err != nil {
			return nil, fmt.Errorf("writing htpasswd: %w", err)
		}
	}
	// A port picked here may be taken by someone else before the registry binds it; the
	// registry then exits with "address already in use" and we try another port.
	for attempt := 1; ; attempt++ {
		if r.Host, err = freePort(); err != nil {
			return nil, err
		}
		if opts.Listen != "" {
			r.Host = opts.Listen
		}
		if err := os.WriteFile(filepath.Join(dir, "config.yml"), r.config(), 0o600); err != nil {
			return nil, fmt.Errorf("writing config.yml: %w", err)
		}
		if r.proc, err = startProcess(append(append([]string(nil), opts.Wrap...), registryBin), filepath.Join(dir, "config.yml"), r.logPath); err != nil {
			return nil, err
		}
		err = r.waitReady(ctx)
		if err == nil {
			break
		}
		_ = r.proc.stop()
		r.proc = nil
		if !errors.Is(err, errAddrInUse) || attempt == 3 || opts.Listen != "" {
			return nil, fmt.Errorf("%w\nregistry log:\n%s", err, r.logTail(20))
		}
	}
	if err := r.addDockerConfigHost(r.Host); err != nil {
		return nil, err
	}
	return r, nil
}

// Close stops the registry (SIGTERM to its process group, SIGKILL after 10s) and removes
// its directory, storage included.
func (r *Registry) Close() error {
	var errs []error
	if r.proc != nil {
		errs = append(errs, r.proc.stop())
		r.proc = nil
	}
	if r.dir != "" {
		errs = append(errs, os.RemoveAll(r.dir))
		r.dir = ""
	}
	return errors.Join(errs...)
}

// Scheme is "https", or "http" with NoTLS.
func (r *Registry) Scheme() string {
	if r.opts.NoTLS {
		return "http"
	}
	return "https"
}

// Ref names a repository in this registry: "127.0.0.1:PORT/<repo>".
func (r *Registry) Ref(repo string) string { return r.Host + "/" + repo }

// Transport returns a new transport that trusts the generated CA (and nothing else) and
// never uses a proxy from the environment.
func (r *Registry) Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	if r.pki != nil {
		t.TLSClientConfig = &tls.Config{RootCAs: r.pki.pool, MinVersion: tls.VersionTLS12}
	}
	return t
}

// Env is what a child process (cosign, crane, pylayer) needs to reach the registry:
// DOCKER_CONFIG, and SSL_CERT_FILE (with TLS; Go then trusts only the generated CA).
func (r *Registry) Env() []string {
	env := []string{"DOCKER_CONFIG=" + r.DockerConfig}
	if r.CAFile != "" {
		env = append(env, "SSL_CERT_FILE="+r.CAFile)
	}
	return env
}

// BlobPath is where distribution's filesystem driver keeps the bytes of blob d. Blobs are
// shared by all repositories, so repo only documents the caller's intent.
func (r *Registry) BlobPath(repo string, d digest.Digest) string {
	_ = repo
	enc := d.Encoded()
	if len(enc) < 2 {
		return filepath.Join(r.Storage, "docker/registry/v2/blobs", d.Algorithm().String(), "invalid-digest")
	}
	return filepath.Join(r.Storage, "docker/registry/v2/blobs", d.Algorithm().String(), enc[:2], enc, "data")
}

// config renders distribution's config.yml. Strings are written as JSON strings, which
// YAML reads unchanged whatever the temp directory's name.
func (r *Registry) config() []byte {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	c := fmt.Sprintf(`version: 0.1
log:
  level: info
  formatter: json
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %s
  secret: %s
  headers:
    X-Content-Type-Options: [nosniff]
`, q(r.Storage), q(r.Host), q(randomHex(16)))
	if !r.opts.HTTP2 {
		c += "  http2:\n    disabled: true\n"
	}
	if r.pki != nil {
		c += fmt.Sprintf("  tls:\n    certificate: %s\n    key: %s\n    minimumtls: tls1.2\n",
			q(r.pki.certFile), q(r.pki.keyFile))
	}
	if !r.opts.NoAuth {
		c += fmt.Sprintf("auth:\n  htpasswd:\n    realm: pylayer-test\n    path: %s\n",
			q(filepath.Join(r.dir, "htpasswd")))
	}
	return []byte(c)
}

var errAddrInUse = errors.New("address already in use")

// waitReady polls /v2/ until it answers as configured: 401 with auth, 200 without.
func (r *Registry) waitReady(ctx context.Context) error {
	want := http.StatusUnauthorized
	if r.opts.NoAuth {
		want = http.StatusOK
	}
	client := &http.Client{Transport: r.Transport(), Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-r.proc.done:
			if containsAddrInUse(r.logPath) {
				return fmt.Errorf("docker-registry on %s: %w", r.Host, errAddrInUse)
			}
			return fmt.Errorf("docker-registry exited before serving: %v", r.proc.err)
		case <-ctx.Done():
			return fmt.Errorf("waiting for docker-registry: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		resp, err := client.Get(r.Scheme() + "://" + r.Host + "/v2/")
		if err != nil {
			last = err
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == want {
			return nil
		}
		last = fmt.Errorf("GET /v2/: status %d, want %d", resp.StatusCode, want)
	}
	return fmt.Errorf("docker-registry on %s not ready after 30s: %v", r.Host, last)
}

// addDockerConfigHost adds host to DockerConfig/config.json with the registry's
// credentials, writing the file atomically.
func (r *Registry) addDockerConfigHost(host string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cfgHosts = append(r.cfgHosts, host)
	type entry struct {
		Auth string `json:"auth"`
	}
	cfg := struct {
		Auths map[string]entry `json:"auths"`
	}{Auths: map[string]entry{}}
	if !r.opts.NoAuth {
		auth := base64.StdEncoding.EncodeToString([]byte(r.User + ":" + r.Password))
		for _, h := range r.cfgHosts {
			cfg.Auths[h] = entry{Auth: auth}
		}
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(r.DockerConfig, ".config.json.tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing docker config: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(r.DockerConfig, "config.json")); err != nil {
		return fmt.Errorf("writing docker config: %w", err)
	}
	return nil
}

// freePort picks a free TCP port on 127.0.0.1.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err)) // never happens on Linux
	}
	return hex.EncodeToString(b)
}
