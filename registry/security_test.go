package registry

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAuth(t *testing.T) {
	ctx := context.Background()
	s := newServer(t, false)
	s.user, s.pass = "ci", "s3cret-pa55word"
	a := artifact("k", layerBlob(t, "a", "auth"))

	dockerConfig(t, s.host, "ci", s.pass)
	r := openRepo(t, s, "team/pylayer", quick())
	_, _, err := Push(ctx, r, a, "base-k")
	must(t, err)
	if strings.Contains(r.Name(), s.pass) || r.Name() != s.host+"/team/pylayer" {
		t.Errorf("Name() = %q", r.Name())
	}

	for _, tc := range []struct{ name, user, pass string }{
		{"wrong password", "ci", "wrong-pa55word"},
		{"no credentials", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.user != "" {
				dockerConfig(t, s.host, tc.user, tc.pass)
			} else {
				t.Setenv("DOCKER_CONFIG", t.TempDir())
			}
			r := openRepo(t, s, "team/pylayer", quick())
			_, err := r.Resolve(ctx, "base-k")
			_, _, perr := Push(ctx, r, a, "base-k2")
			for _, err := range []error{err, perr} {
				if !errors.Is(err, ErrUnauthorized) {
					t.Fatalf("err = %v, want ErrUnauthorized", err)
				}
				cfg := filepath.Join(os.Getenv("DOCKER_CONFIG"), "config.json")
				want := s.host + "/team/pylayer: authentication failed: the registry rejected the credentials for " + s.host + " from " + cfg + ": check them, or run `docker login " + s.host + "` again"
				if tc.user == "" {
					want = s.host + "/team/pylayer: authentication failed: no credentials for " + s.host + " were found in " + cfg + " (which does not exist) (none were sent): run `docker login " + s.host + "`"
				}
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %q\nwant it to contain %q", err, want)
				}
				for _, secret := range []string{tc.pass, s.pass, base64.StdEncoding.EncodeToString([]byte(tc.user + ":" + tc.pass))} {
					if secret != "" && strings.Contains(err.Error(), secret) {
						t.Errorf("error reveals a secret: %q", err)
					}
				}
			}
		})
	}
}

// writeCA writes the test server's certificate as a PEM file.
func writeCA(t *testing.T, s *server) string {
	p := filepath.Join(t.TempDir(), "ca.pem")
	must(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}), 0o644))
	return p
}

func TestTLS(t *testing.T) {
	ctx := context.Background()
	s := newServer(t, true)
	ref, err := ParseRef(s.host + "/team/tls")
	must(t, err)
	a := artifact("k", layerBlob(t, "t", "tls"))

	// Trusted through --ca-file.
	o := quick()
	o.CAFile = writeCA(t, s)
	r, err := Open(ctx, ref, o)
	must(t, err)
	_, _, err = Push(ctx, r, a, "t")
	must(t, err)

	// Untrusted: a clear error, and no retries of a certificate failure.
	before := s.total()
	start := time.Now()
	_, err = Open(ctx, ref, Options{Retries: 5, RetryDelay: time.Second})
	if err == nil || !errors.Is(err, ErrUntrustedCert) || !strings.Contains(err.Error(), "not trusted") || !strings.Contains(err.Error(), "--ca-file") ||
		!strings.Contains(err.Error(), "unknown authority") || strings.Contains(err.Error(), "http://") || strings.Contains(err.Error(), "HTTP response") {
		t.Errorf("untrusted certificate: %v\nwant ErrUntrustedCert naming the certificate's error, without the transport's plain-HTTP fallback", err)
	}
	if time.Since(start) > 3*time.Second || s.total() != before {
		t.Errorf("the certificate failure was retried (%s, %d requests)", time.Since(start), s.total()-before)
	}

	// --insecure-registry skips verification for that host only.
	o = quick()
	o.Insecure = []string{s.host}
	r, err = Open(ctx, ref, o)
	must(t, err)
	if _, err := r.Resolve(ctx, "t"); err != nil {
		t.Error(err)
	}

	// A CA file that holds no certificate.
	bad := filepath.Join(t.TempDir(), "bad.pem")
	must(t, os.WriteFile(bad, []byte("nothing"), 0o644))
	if _, err := Open(ctx, ref, Options{CAFile: bad}); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("bad CA file: %v", err)
	}
}

func TestRegistryDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	host := l.Addr().String()
	l.Close()
	ref, err := ParseRef(host + "/team/pylayer")
	must(t, err)
	_, err = Open(context.Background(), ref, Options{RetryDelay: time.Millisecond})
	want := host + " is not answering (connection refused) after 5 attempts"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v\nwant it to contain %q", err, want)
	}
}

func TestPlainHTTPPolicy(t *testing.T) {
	tests := []struct {
		host     string
		insecure []string
		plain    bool // plain HTTP allowed
		skip     bool // TLS verification skipped
	}{
		{"127.0.0.1:5000", nil, true, false},
		{"127.8.9.10", nil, true, false},
		{"localhost:5000", nil, true, false},
		{"LOCALHOST", nil, true, false},
		{"[::1]:5000", nil, true, false},
		{"10.0.0.5:5000", nil, false, false},
		{"192.168.1.2:5000", nil, false, false},
		{"registry.example.com", nil, false, false},
		{"localhost.evil.example:5000", nil, false, false},
		{"127.0.0.1.nip.io:5000", nil, false, false},
		{"10.0.0.5:5000", []string{"10.0.0.5:5000"}, true, true},
		{"10.0.0.5:5000", []string{"10.0.0.5"}, true, true},
		{"10.0.0.5:5000", []string{"10.0.0.5:5001"}, false, false},
		{"10.0.0.5:5000", []string{"10.0.0.0/8"}, true, true},
		{"11.0.0.5:5000", []string{"10.0.0.0/8"}, false, false},
		{"Registry.Example.com:443", []string{"registry.example.com:443"}, true, true},
		{"127.0.0.1:5000", []string{"127.0.0.1:5000"}, true, true},
		{"[fd00::1]:5000", []string{"fd00::/8"}, true, true},
	}
	for _, tc := range tests {
		if got := PlainHTTPAllowed(tc.host, tc.insecure); got != tc.plain {
			t.Errorf("PlainHTTPAllowed(%q, %q) = %v", tc.host, tc.insecure, got)
		}
		if got := SkipTLSVerify(tc.host, tc.insecure); got != tc.skip {
			t.Errorf("SkipTLSVerify(%q, %q) = %v", tc.host, tc.insecure, got)
		}
	}
	for _, bad := range []string{"", "10.0.0.0/99", "a b"} {
		if _, err := (Options{Insecure: []string{bad}}).withDefaults(); err == nil {
			t.Errorf("insecure entry %q accepted", bad)
		}
	}
}

// noNetwork is a transport that must only see https requests; it answers none.
type noNetwork struct{ plain []string }

func (n *noNetwork) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != "https" {
		n.plain = append(n.plain, r.URL.String())
	}
	return nil, errors.New("https refused by the test transport")
}

func TestPlainHTTPRefused(t *testing.T) {
	// A private address: go-containerregistry would fall back to http; the policy refuses.
	ref, err := ParseRef("10.1.2.3:5000/team/pylayer")
	must(t, err)
	nn := &noNetwork{}
	_, err = Open(context.Background(), ref, Options{Transport: nn, Retries: 1})
	if !errors.Is(err, ErrPlainHTTP) || !strings.Contains(err.Error(), "--insecure-registry 10.1.2.3:5000") {
		t.Errorf("err = %v, want ErrPlainHTTP with advice", err)
	}
	if len(nn.plain) != 0 {
		t.Errorf("plain HTTP requests reached the network: %v", nn.plain)
	}

	// The policy transport by itself, for a redirect or token server off the registry.
	pt := &policyTransport{inner: nn}
	req, _ := http.NewRequest(http.MethodGet, "http://storage.example.com/blob", nil)
	if _, err := pt.RoundTrip(req); !errors.Is(err, ErrPlainHTTP) {
		t.Errorf("policy transport: %v", err)
	}
}
