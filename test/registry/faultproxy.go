package registrytest

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// ResetConnection as the planned status makes the fault proxy drop the connection with a
// TCP reset instead of answering.
const ResetConnection = -1

// StartFaultProxy runs a reverse proxy to upstream on 127.0.0.1 (TLS with the same CA when
// upstream has TLS) and returns its host ("127.0.0.1:PORT"), which is also added to
// upstream.DockerConfig with upstream's credentials.
//
// plan decides each request's fate; n counts the requests through this proxy from 0, and
// plan is called for one request at a time, in arrival order. pass forwards the request
// untouched; otherwise the proxy answers status (with an OCI error body) or, when status is
// ResetConnection, resets the connection; such requests never reach the registry, so
// they are not in upstream.Requests. The proxy keeps the client's Host header, so
// the upload locations the registry hands out point back at the proxy.
func StartFaultProxy(t testing.TB, upstream *Registry, plan func(n int, req *http.Request) (status int, pass bool)) (host string) {
	t.Helper()
	target := &url.URL{Scheme: upstream.Scheme(), Host: upstream.Host}
	transport := upstream.Transport()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
		},
		Transport: transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t.Logf("fault proxy: %s %s: %v", r.Method, r.URL, err)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	var (
		mu sync.Mutex
		n  int
	)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		status, pass := plan(n, r)
		n++
		mu.Unlock()
		switch {
		case pass:
			rp.ServeHTTP(w, r)
		case status == ResetConnection:
			resetConnection(t, w)
		case status < 100 || status > 999:
			t.Errorf("fault proxy: plan returned status %d without pass", status)
			resetConnection(t, w)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"errors":[{"code":"UNAVAILABLE","message":"fault injected by the test proxy (status %d)"}]}`+"\n", status)
		}
	})

	srv := httptest.NewUnstartedServer(handler)
	if a, ok := srv.Listener.Addr().(*net.TCPAddr); !ok || !a.IP.Equal(net.IPv4(127, 0, 0, 1)) {
		srv.Listener.Close()
		t.Fatalf("fault proxy: listening on %s, want 127.0.0.1", srv.Listener.Addr())
	}
	if upstream.pki != nil {
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{upstream.pki.cert}, MinVersion: tls.VersionTLS12}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(func() {
		srv.Close()
		transport.CloseIdleConnections()
	})
	host = srv.Listener.Addr().String()
	if err := upstream.addDockerConfigHost(host); err != nil {
		t.Fatalf("fault proxy: %v", err)
	}
	return host
}

// resetConnection takes the connection over and closes it with SO_LINGER 0, which sends a
// TCP RST: the client sees "connection reset by peer", not a clean EOF.
func resetConnection(t testing.TB, w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("fault proxy: hijacking the connection: %v", err)
		return
	}
	raw := conn
	if tc, ok := conn.(*tls.Conn); ok {
		raw = tc.NetConn()
	}
	if tcp, ok := raw.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = raw.Close()
}
