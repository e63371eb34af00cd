package registry

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ggcr "github.com/google/go-containerregistry/pkg/registry"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
)

// server is go-containerregistry's in-memory registry behind a handler that records
// requests, counts uploaded bytes and concurrency, checks basic auth and injects faults.
type server struct {
	*httptest.Server
	host string
	reg  http.Handler

	mu          sync.Mutex
	reqs        []string // "METHOD /path"
	blobPutN    int64    // bytes of blob upload bodies (PUT/PATCH under /blobs/uploads/)
	inflight    int
	maxInflight int
	putDelay    time.Duration
	user, pass  string
	fault       func(w http.ResponseWriter, r *http.Request) bool // true: handled
}

func newServer(t testing.TB, useTLS bool) *server {
	t.Helper()
	s := &server{reg: ggcr.New(ggcr.Logger(log.New(io.Discard, "", 0)))}
	s.Server = httptest.NewUnstartedServer(s)
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // TLS handshake failures are expected
	if useTLS {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	s.host = s.Listener.Addr().String()
	return s
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.reqs = append(s.reqs, r.Method+" "+r.URL.Path)
	user, pass, fault := s.user, s.pass, s.fault
	s.mu.Unlock()
	if user != "" {
		u, p, ok := r.BasicAuth()
		if !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
	}
	if fault != nil && fault(w, r) {
		return
	}
	if isBlobUpload(r) && r.Method != http.MethodPost {
		s.mu.Lock()
		s.inflight++
		s.maxInflight = max(s.maxInflight, s.inflight)
		delay := s.putDelay
		s.mu.Unlock()
		defer func() { s.mu.Lock(); s.inflight--; s.mu.Unlock() }()
		time.Sleep(delay)
		r.Body = &countBody{r.Body, s}
	}
	s.reg.ServeHTTP(w, r)
}

func isBlobUpload(r *http.Request) bool { return strings.Contains(r.URL.Path, "/blobs/uploads/") }

type countBody struct {
	io.ReadCloser
	s *server
}

func (c *countBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.s.mu.Lock()
	c.s.blobPutN += int64(n)
	c.s.mu.Unlock()
	return n, err
}

func (s *server) setFault(f func(w http.ResponseWriter, r *http.Request) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

func (s *server) uploadedBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.blobPutN
}

// count returns how many requests had this method and a path containing substr.
func (s *server) count(method, substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.reqs {
		m, p, _ := strings.Cut(r, " ")
		if m == method && strings.Contains(p, substr) {
			n++
		}
	}
	return n
}

func (s *server) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// reset kills the connection without an answer, as a crashing server would.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0) // RST, not FIN
	}
	conn.Close()
}

// quick are options that keep retries fast in tests.
func quick() Options { return Options{RetryDelay: time.Millisecond, Retries: 3} }

func openRepo(t *testing.T, s *server, path string, o Options) Repo {
	t.Helper()
	ref, err := ParseRef(s.host + "/" + path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(context.Background(), ref, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// layerBlob packs a one-file tree with oci.TarTree into a file.
func layerBlob(t testing.TB, name, content string) oci.LayerBlob {
	t.Helper()
	tree := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(tree, "site-packages"), 0o755))
	must(t, os.WriteFile(filepath.Join(tree, "site-packages", name+".py"), []byte(content), 0o644))
	f, err := os.Create(filepath.Join(t.TempDir(), name+".tar.gz"))
	must(t, err)
	defer f.Close()
	bw := bufio.NewWriter(f)
	desc, _, err := oci.TarTree(context.Background(), tree, bw)
	must(t, err)
	must(t, bw.Flush())
	return oci.LayerBlob{Path: f.Name(), Desc: desc, Title: oci.BlobTitle(name + "-1.0-py3-none-any.whl"), Wheel: name + "-1.0-py3-none-any.whl", WheelSHA256: digest.FromString(name).Encoded()}
}

func artifact(key string, layers ...oci.LayerBlob) oci.Artifact {
	return oci.Artifact{
		ArtifactType: oci.ArtifactTypeLayer,
		Config:       []byte(`{"lock":"test"}`),
		Layers:       layers,
		Annotations:  map[string]string{oci.AnnotationKind: "base", oci.AnnotationKey: key},
	}
}

func layers(t *testing.T, n int, prefix string) []oci.LayerBlob {
	var out []oci.LayerBlob
	for i := range n {
		out = append(out, layerBlob(t, fmt.Sprintf("%s%d", prefix, i), strings.Repeat(fmt.Sprintf("%s %d\n", prefix, i), 2000)))
	}
	return out
}

// dockerConfig writes a config.json with credentials for host and points DOCKER_CONFIG at it.
func dockerConfig(t *testing.T, host, user, pass string) {
	dir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	must(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, host, auth)), 0o600))
	t.Setenv("DOCKER_CONFIG", dir)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
