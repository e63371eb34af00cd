package registrytest

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestFaultProxyPlans(t *testing.T) {
	r := Start(t, Options{})
	tests := []struct {
		name    string
		plan    func(n int, req *http.Request) (int, bool)
		want    []int // status per GET /v2/; 0 = transport error
		wantErr string
	}{
		{
			name: "503 then pass",
			plan: func(n int, _ *http.Request) (int, bool) { return http.StatusServiceUnavailable, n > 0 },
			want: []int{503, 200, 200},
		},
		{
			name: "every other request 500",
			plan: func(n int, _ *http.Request) (int, bool) { return http.StatusInternalServerError, n%2 == 1 },
			want: []int{500, 200, 500, 200},
		},
		{
			name:    "reset then pass",
			plan:    func(n int, _ *http.Request) (int, bool) { return ResetConnection, n > 0 },
			want:    []int{0, 200},
			wantErr: "connection reset by peer",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := StartFaultProxy(t, r, tt.plan)
			if !strings.HasPrefix(host, "127.0.0.1:") {
				t.Errorf("proxy host %q, want 127.0.0.1:PORT", host)
			}
			for i, want := range tt.want {
				// A fresh connection each time: a reset one is gone anyway.
				tr := r.Transport()
				req, _ := http.NewRequest(http.MethodGet, "https://"+host+"/v2/", nil)
				req.SetBasicAuth(r.User, r.Password)
				resp, err := (&http.Client{Transport: tr}).Do(req)
				tr.CloseIdleConnections()
				if want == 0 {
					if err == nil {
						resp.Body.Close()
						t.Fatalf("request %d: status %d, want a transport error", i, resp.StatusCode)
					}
					if !strings.Contains(err.Error(), tt.wantErr) {
						t.Errorf("request %d: %v, want %q", i, err, tt.wantErr)
					}
					continue
				}
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("request %d: status %d, want %d", i, resp.StatusCode, want)
				}
			}
		})
	}
}

// TestFaultProxyRegistryClient pushes through the proxy (upload locations must lead back to
// it) and pulls with a client that retries injected 503s and resets.
func TestFaultProxyRegistryClient(t *testing.T) {
	r := Start(t, Options{})
	var (
		mu     sync.Mutex
		seen   []string
		failed = map[string]bool{}
		faults bool
	)
	host := StartFaultProxy(t, r, func(n int, req *http.Request) (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		key := req.Method + " " + req.URL.Path
		seen = append(seen, key)
		if !faults || failed[key] || req.Method != http.MethodGet || !strings.Contains(key, "/team/") {
			return 0, true
		}
		failed[key] = true
		if strings.Contains(key, "/blobs/") {
			return ResetConnection, false
		}
		return http.StatusServiceUnavailable, false
	})

	img := pushRandom(t, r, host, "team/pylayer")
	mu.Lock()
	var uploads int
	for _, k := range seen {
		if strings.HasPrefix(k, "PUT ") && strings.Contains(k, "/blobs/uploads/") {
			uploads++
		}
	}
	faults = true
	mu.Unlock()
	if uploads != 3 { // two layers and the config
		t.Errorf("blob upload PUTs through the proxy: %d, want 3 (upload locations must point at the proxy)", uploads)
	}

	// The proxy host is in DockerConfig too.
	t.Setenv("DOCKER_CONFIG", r.DockerConfig)
	ref, _ := name.ParseReference(host + "/team/pylayer:t1")
	pulled, err := remote.Image(ref,
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithTransport(r.Transport()),
		remote.WithRetryBackoff(remote.Backoff{Duration: 10 * time.Millisecond, Factor: 1, Steps: 3}))
	if err != nil {
		t.Fatalf("pulling through the fault proxy: %v", err)
	}
	layers, err := pulled.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatalf("fetching a layer through the fault proxy: %v", err)
		}
		rc.Close()
	}
	want := mustDigest(t, img.Digest)
	if got := mustDigest(t, pulled.Digest); got != want {
		t.Errorf("pulled %s, pushed %s", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	var manifestFaults, blobFaults int
	for k := range failed {
		switch {
		case strings.Contains(k, "/manifests/"):
			manifestFaults++
		case strings.Contains(k, "/blobs/"):
			blobFaults++
		}
	}
	if manifestFaults != 1 || blobFaults != 2 { // the config is never fetched: Layers reads the manifest
		t.Errorf("faults injected: %d manifest, %d blob; want 1 and 2 (the layers):\n%v",
			manifestFaults, blobFaults, seen)
	}
}
