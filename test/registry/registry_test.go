package registrytest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/pylayer/pylayer/oci/digest"
)

// get sends GET url with optional basic auth and returns status and headers.
func get(t *testing.T, client *http.Client, url, user, pass string) (int, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header
}

func TestStart(t *testing.T) {
	tests := []struct {
		name string
		opts Options
	}{
		{"tls+auth", Options{}},
		{"tls", Options{NoAuth: true}},
		{"auth", Options{NoTLS: true}},
		{"plain", Options{NoTLS: true, NoAuth: true}},
		{"tls+auth+h2", Options{HTTP2: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := Start(t, tt.opts)
			if !strings.HasPrefix(r.Host, "127.0.0.1:") {
				t.Errorf("Host = %q, want 127.0.0.1:PORT", r.Host)
			}
			client := &http.Client{Transport: r.Transport()}
			v2 := r.Scheme() + "://" + r.Host + "/v2/"

			status, hdr := get(t, client, v2, "", "")
			if tt.opts.NoAuth {
				if status != http.StatusOK {
					t.Errorf("GET /v2/ without auth configured: %d, want 200", status)
				}
			} else {
				if status != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Basic ") {
					t.Errorf("GET /v2/ without creds: %d %q, want 401 Basic", status, hdr.Get("WWW-Authenticate"))
				}
				if status, _ := get(t, client, v2, r.User, "wrong"); status != http.StatusUnauthorized {
					t.Errorf("GET /v2/ with a wrong password: %d, want 401", status)
				}
				if status, _ := get(t, client, v2, r.User, r.Password); status != http.StatusOK {
					t.Errorf("GET /v2/ with creds: %d, want 200", status)
				}
			}

			if tt.opts.NoTLS {
				if r.CAFile != "" {
					t.Errorf("CAFile = %q without TLS", r.CAFile)
				}
			} else {
				// Nothing but the generated CA vouches for the server.
				if _, err := http.Get(v2); err == nil || !strings.Contains(err.Error(), "certificate") {
					t.Errorf("GET with the system roots: %v, want a certificate error", err)
				}
				if status, _ := get(t, client, "http://"+r.Host+"/v2/", "", ""); status != http.StatusBadRequest {
					t.Errorf("plain HTTP to the TLS port: %d, want 400", status)
				}
				if b, err := os.ReadFile(r.CAFile); err != nil || !bytes.Contains(b, []byte("BEGIN CERTIFICATE")) {
					t.Errorf("CAFile %s: %v", r.CAFile, err)
				}
				// HTTP/2 only when asked for (see Options.HTTP2).
				resp, err := client.Get(v2)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if want := map[bool]int{false: 1, true: 2}[tt.opts.HTTP2]; resp.ProtoMajor != want {
					t.Errorf("protocol %s, want HTTP/%d", resp.Proto, want)
				}
			}

			var cfg struct {
				Auths map[string]struct{ Auth string } `json:"auths"`
			}
			b, err := os.ReadFile(filepath.Join(r.DockerConfig, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			want := ""
			if !tt.opts.NoAuth {
				want = base64.StdEncoding.EncodeToString([]byte(r.User + ":" + r.Password))
			}
			if got := cfg.Auths[r.Host].Auth; got != want {
				t.Errorf("config.json auth for %s = %q, want %q", r.Host, got, want)
			}
		})
	}
}

// pushRandom pushes a random two-layer image to repo:tag and returns it.
func pushRandom(t *testing.T, r *Registry, host, repo string, opts ...remote.Option) v1.Image {
	t.Helper()
	img, err := random.Image(4096, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(host + "/" + repo + ":t1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, append(remoteOpts(r), opts...)...); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	return img
}

func remoteOpts(r *Registry) []remote.Option {
	return []remote.Option{
		remote.WithAuth(authn.FromConfig(authn.AuthConfig{Username: r.User, Password: r.Password})),
		remote.WithTransport(r.Transport()),
	}
}

func mustDigest(t *testing.T, f func() (v1.Hash, error)) digest.Digest {
	t.Helper()
	h, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return digest.Digest(h.String())
}

func TestPushPullAndLog(t *testing.T) {
	r := Start(t, Options{})
	img := pushRandom(t, r, r.Host, "team/pylayer")
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d0, d1 := mustDigest(t, layers[0].Digest), mustDigest(t, layers[1].Digest)
	size0, err := layers[0].Size()
	if err != nil {
		t.Fatal(err)
	}

	// The push itself is in the log.
	var puts int
	for _, q := range r.Requests() {
		if q.Method == http.MethodPut && strings.Contains(q.Path, "/manifests/t1") && q.Status == http.StatusCreated {
			puts++
		}
	}
	if puts != 1 {
		t.Errorf("log shows %d manifest PUTs with 201, want 1:\n%v", puts, r.Requests())
	}

	r.ResetLog()
	if got := r.Requests(); len(got) != 0 {
		t.Errorf("Requests after ResetLog = %v, want none", got)
	}
	ref, _ := name.ParseReference(r.Ref("team/pylayer:t1"))
	pulled, err := remote.Image(ref, remoteOpts(r)...)
	if err != nil {
		t.Fatalf("pulling: %v", err)
	}
	if got, want := mustDigest(t, pulled.Digest), mustDigest(t, img.Digest); got != want {
		t.Fatalf("pulled manifest %s, pushed %s", got, want)
	}
	pl, err := pulled.LayerByDigest(v1.Hash{Algorithm: "sha256", Hex: d0.Encoded()})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := pl.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	blob, err := io.ReadAll(rc) // ggcr verifies the digest at EOF
	rc.Close()
	if err != nil {
		t.Fatalf("reading blob %s: %v", d0, err)
	}
	if int64(len(blob)) != size0 {
		t.Errorf("blob %s: %d bytes, want %d", d0, len(blob), size0)
	}

	for _, c := range []struct {
		d    digest.Digest
		want int
	}{{d0, 1}, {d1, 0}} {
		if got := r.BlobGETs(c.d); got != c.want {
			t.Errorf("BlobGETs(%s) = %d, want %d; requests:\n%v", c.d, got, c.want, r.Requests())
		}
	}
	if got := r.BytesServed(); got < size0 {
		t.Errorf("BytesServed = %d, want at least the blob's %d", got, size0)
	}
	var sawBlob bool
	for _, q := range r.Requests() {
		if q.Method == http.MethodGet && strings.HasSuffix(q.Path, "/blobs/"+d0.String()) {
			sawBlob = q.Status == http.StatusOK && q.Written == size0
		}
	}
	if !sawBlob {
		t.Errorf("no GET of %s with 200 and %d bytes in %v", d0, size0, r.Requests())
	}

	// BlobPath holds the bytes; tampering there is what a pull must catch.
	p := r.BlobPath("team/pylayer", d0)
	onDisk, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("BlobPath: %v", err)
	}
	if sum := sha256.Sum256(onDisk); digest.NewDigestFromBytes(digest.SHA256, sum[:]) != d0 {
		t.Fatalf("BlobPath %s does not hold %s", p, d0)
	}
	tampered := bytes.Clone(onDisk)
	tampered[len(tampered)/2] ^= 0xff
	if err := os.WriteFile(p, tampered, 0o644); err != nil {
		t.Fatal(err)
	}
	pl, _ = pulled.LayerByDigest(v1.Hash{Algorithm: "sha256", Hex: d0.Encoded()})
	rc, err = pl.Compressed()
	if err == nil {
		_, err = io.ReadAll(rc)
		rc.Close()
	}
	if err == nil {
		t.Errorf("reading a tampered blob succeeded")
	}
}

// TestUnauthorizedIsLogged: rejected requests show up in Requests too.
func TestUnauthorizedIsLogged(t *testing.T) {
	r := Start(t, Options{})
	client := &http.Client{Transport: r.Transport()}
	r.ResetLog()
	get(t, client, r.Scheme()+"://"+r.Host+"/v2/team/pylayer/manifests/nope", "", "")
	get(t, client, r.Scheme()+"://"+r.Host+"/v2/team/pylayer/manifests/nope", r.User, r.Password)
	got := r.Requests()
	want := []Request{
		{Method: "GET", Path: "/v2/team/pylayer/manifests/nope", Status: http.StatusUnauthorized},
		{Method: "GET", Path: "/v2/team/pylayer/manifests/nope", Status: http.StatusNotFound},
	}
	if len(got) != len(want) {
		t.Fatalf("Requests = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Method != want[i].Method || got[i].Path != want[i].Path || got[i].Status != want[i].Status {
			t.Errorf("request %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestDockerConfigForChildProcesses(t *testing.T) {
	r := Start(t, Options{})
	img := pushRandom(t, r, r.Host, "team/pylayer")
	want := mustDigest(t, img.Digest)

	// go-containerregistry's default keychain reads $DOCKER_CONFIG like docker and cosign.
	t.Setenv("DOCKER_CONFIG", r.DockerConfig)
	ref, _ := name.ParseReference(r.Ref("team/pylayer:t1"))
	desc, err := remote.Head(ref, remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithTransport(r.Transport()))
	if err != nil {
		t.Fatalf("HEAD with the DockerConfig keychain: %v", err)
	}
	if digest.Digest(desc.Digest.String()) != want {
		t.Errorf("HEAD = %s, want %s", desc.Digest, want)
	}

	// The stock cosign CLI reaches the registry with nothing but Env().
	cosign := Tool(t, "cosign")
	out := run(t, nil, cosign, "version")
	if !strings.Contains(out, "v2.6.5") {
		t.Errorf("cosign version does not say v2.6.5:\n%s", out)
	}
	out = run(t, r.Env(), cosign, "triangulate", r.Ref("team/pylayer:t1"))
	wantSig := r.Ref("team/pylayer") + ":sha256-" + want.Encoded() + ".sig"
	if strings.TrimSpace(out) != wantSig {
		t.Errorf("cosign triangulate = %q, want %q", strings.TrimSpace(out), wantSig)
	}
}

// run runs a tool with a clean environment plus env and returns its stdout.
func run(t *testing.T, env []string, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("%s %v: exit %d\n%s", bin, args, ee.ExitCode(), stderr.String())
		}
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return stdout.String()
}
