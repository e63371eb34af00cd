package broker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// failsafe bounds every wait on the network in these tests; each test asserts on what
// arrives well before it.
const failsafe = 20 * time.Second

// serve runs e's server with Serve (its limits, its connection cap) on a fresh listener and
// returns the address. At cleanup it stops the server and checks the shutdown was clean.
func (e *env) serve(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// dial opens a raw connection with the failsafe deadline.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(failsafe))
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes a raw request on c and reads one response.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, raw string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const getHealthz = "GET /healthz HTTP/1.1\r\nHost: broker\r\n\r\n"

// closedByServer reports whether the server closed c: a read ends with EOF (or a reset),
// not with the failsafe deadline.
func closedByServer(c net.Conn, br *bufio.Reader) error {
	_, err := br.ReadByte()
	var ne net.Error
	switch {
	case err == nil:
		return errors.New("the server sent more")
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("the connection is still open after %s", failsafe)
	}
	return nil
}

func TestSlowBodyCutOff(t *testing.T) {
	const readTimeout, uploadTimeout = 300 * time.Millisecond, 500 * time.Millisecond
	e := newEnv(t, func(o *broker.Options) {
		o.HTTP = broker.HTTPLimits{ReadHeaderTimeout: readTimeout, ReadTimeout: readTimeout, UploadTimeout: uploadTimeout, WriteTimeout: 5 * time.Second}
	})
	addr := e.serve(t)
	ct, wheelBody := multipartBody(t, [3]string{"wheel", "demo_pkg-1.0-py3-none-any.whl", wheelBytes(t, "demo-pkg", "1.0", nil)})
	for _, tc := range []struct {
		name, ctype, body string
		limit             time.Duration
	}{
		{"json", "application/json", `{"packages": ["pendme==1.0"]}` + strings.Repeat(" ", 2000), readTimeout},
		{"upload", ct, wheelBody, uploadTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshot()
			c := dial(t, addr)
			br := bufio.NewReader(c)
			head := fmt.Sprintf("POST /v1/sessions/%s/requests HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer %s\r\n"+
				"Content-Type: %s\r\nContent-Length: %d\r\n\r\n", e.sesA, e.agentA, tc.ctype, len(tc.body))
			if _, err := io.WriteString(c, head+tc.body[:10]); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			// The attacker: a byte every 20 ms, so the whole body would take tens of seconds.
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for i := 10; i < len(tc.body); i++ {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					if _, err := c.Write([]byte{tc.body[i]}); err != nil {
						return
					}
				}
			}()
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			took := time.Since(start)
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "did not arrive in time") {
				t.Errorf("slow body: %d %s, want 408", resp.StatusCode, b)
			}
			if took > tc.limit+3*time.Second {
				t.Errorf("cut off after %s, the limit is %s", took, tc.limit)
			}
			if err := closedByServer(c, br); err != nil {
				t.Error(err)
			}
			e.unchanged("a slow body", before)
		})
	}
}

func TestIdleConnectionClosed(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) {
		o.HTTP.IdleTimeout, o.HTTP.ReadHeaderTimeout = 200*time.Millisecond, 200*time.Millisecond
	})
	c := dial(t, e.serve(t))
	br := bufio.NewReader(c)
	if resp, body := roundTrip(t, c, br, getHealthz); resp.StatusCode != 200 {
		t.Fatalf("healthz: %d %s", resp.StatusCode, body)
	}
	if err := closedByServer(c, br); err != nil { // idle after one request
		t.Error(err)
	}
	c2 := dial(t, e.serve(t))
	if err := closedByServer(c2, bufio.NewReader(c2)); err != nil { // never sent a byte: the header timeout
		t.Error(err)
	}
}

func TestConnectionCap(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.HTTP.MaxConns = 2 })
	addr := e.serve(t)
	var held []net.Conn
	for range 2 {
		c := dial(t, addr)
		if resp, body := roundTrip(t, c, bufio.NewReader(c), getHealthz); resp.StatusCode != 200 {
			t.Fatalf("connection under the cap: %d %s", resp.StatusCode, body)
		}
		held = append(held, c) // kept alive
	}
	c := dial(t, addr)
	br := bufio.NewReader(c)
	resp, body := roundTrip(t, c, br, getHealthz)
	var ae struct{ Error, Hint string }
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		json.Unmarshal([]byte(body), &ae) != nil || !strings.Contains(ae.Error, "connections") || ae.Hint == "" {
		t.Errorf("connection over the cap: %d %v %s, want 503 JSON with Retry-After", resp.StatusCode, resp.Header, body)
	}
	if err := closedByServer(c, br); err != nil {
		t.Error(err)
	}
	// A closed connection frees its place: a new one is served once the server notices.
	held[0].Close()
	deadline := time.Now().Add(failsafe)
	for {
		c := dial(t, addr)
		resp, _ := roundTrip(t, c, bufio.NewReader(c), getHealthz)
		c.Close()
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after closing a connection, new ones still get %d", resp.StatusCode)
		}
	}
}

func TestHeaderLimit(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.HTTP.MaxHeaderBytes = 4096 })
	addr := e.serve(t)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	small := "GET /healthz HTTP/1.1\r\nHost: broker\r\nX-Pad: " + strings.Repeat("a", 2000) + "\r\n\r\n"
	if resp, body := roundTrip(t, c, br, small); resp.StatusCode != 200 {
		t.Errorf("2 KB of headers: %d %s", resp.StatusCode, body)
	}
	big := "GET /healthz HTTP/1.1\r\nHost: broker\r\nX-Pad: " + strings.Repeat("a", 32<<10) + "\r\n\r\n"
	if resp, body := roundTrip(t, c, br, big); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("32 KB of headers: %d %s, want 431", resp.StatusCode, body)
	}
}

func TestLongPollPastWriteTimeout(t *testing.T) {
	const timeout, wait = 200 * time.Millisecond, 1200 * time.Millisecond
	e := newEnv(t, func(o *broker.Options) {
		o.HTTP = broker.HTTPLimits{ReadHeaderTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout}
	})
	addr := e.serve(t)
	pend := e.request(e.agentA, e.sesA, `"pendme"`)
	get := func(path string) (int, broker.Request, time.Duration) {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		req.Header.Set("Authorization", "Bearer "+e.agentA)
		start := time.Now()
		resp, err := (&http.Client{Timeout: failsafe}).Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		var r broker.Request
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp.StatusCode, r, time.Since(start)
	}
	// The wait ends with no change: the answer comes after the write timeout, whole.
	code, r, took := get("/v1/requests/" + pend.ID + "?wait=" + wait.String())
	if code != 200 || r.ID != pend.ID || r.State != broker.StatePending || took < wait {
		t.Errorf("long poll: %d %+v after %s, want 200 pending after %s", code, r, took, wait)
	}
	// A change ends the wait early, also past the timeouts: the deny comes once the long
	// poll is in place and another long poll on the request has outlived the timeouts.
	go func() {
		waitFor(t, "a long poll in place", func() bool { return broker.Watched(e.srv) > 0 })
		if code, _, b := e.do("GET", "/v1/requests/"+pend.ID+"?wait=300ms", e.agentA, "", ""); code != 200 {
			t.Errorf("second long poll: %d %s", code, b)
		}
		if code, _, b := e.do("POST", "/v1/requests/"+pend.ID+"/deny", e.alice, "application/json", `{"reason":"no"}`); code != 200 {
			t.Errorf("deny: %d %s", code, b)
		}
	}()
	code, r, took = get("/v1/requests/" + pend.ID + "?wait=60s")
	if code != 200 || r.State != broker.StateDenied || took < 300*time.Millisecond {
		t.Errorf("woken long poll: %d %+v after %s, want 200 denied after more than 300ms", code, r, took)
	}
}

// waitFor polls cond until it holds, failing after the failsafe.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(failsafe)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("no %s after %s", what, failsafe)
			return
		}
		time.Sleep(time.Millisecond) // polling a condition, not waiting for it to happen
	}
}

// slowLayers lists layers slowly, as a registry far away does.
type slowLayers struct{ d time.Duration }

func (l slowLayers) Layers(ctx context.Context) ([]broker.Layer, error) {
	time.Sleep(l.d)
	return fakeLayers{}.Layers(ctx)
}

// The timeouts bound the client, not the broker's own work: a request whose
// classification, or a listing whose registry, outlives the read and write timeouts is
// still done and answered.
func TestSlowWorkOutlivesTimeouts(t *testing.T) {
	const timeout = 200 * time.Millisecond
	e := newEnv(t, func(o *broker.Options) {
		o.HTTP = broker.HTTPLimits{ReadHeaderTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout}
		o.Classifier = fakeClassifier{slow: 4 * timeout}
		o.Layers = slowLayers{4 * timeout}
	})
	var r broker.Request
	e.mustDo("POST", "/v1/sessions/"+e.sesA+"/requests", e.agentA, "application/json", `{"packages": ["slowpkg"]}`, http.StatusCreated, &r)
	if _, err := e.store.GetRequest(t.Context(), r.ID); err != nil || r.State != broker.StateApproved {
		t.Errorf("the slow request %+v was not stored: %v", r, err)
	}
	var l struct{ Layers []broker.Layer }
	e.mustDo("GET", "/v1/layers", e.admin, "", "", http.StatusOK, &l)
	if len(l.Layers) != 1 {
		t.Errorf("slow listing: %+v", l)
	}
}

func TestServeShutdownEndsLongPolls(t *testing.T) {
	e := newEnv(t, nil)
	pend := e.request(e.agentA, e.sesA, `"pendme"`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ctx, ln) }()
	c := dial(t, ln.Addr().String())
	br := bufio.NewReader(c)
	if _, err := fmt.Fprintf(c, "GET /v1/requests/%s?wait=60s HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer %s\r\n\r\n", pend.ID, e.agentA); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "long poll in place", func() bool { return broker.Watched(e.srv) > 0 })
	// Readiness holds until shutdown.
	if code, _, body := e.do("GET", "/readyz", "", "", ""); code != 200 {
		t.Fatalf("readyz: %d %s", code, body)
	}
	cancel()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the long poll got no answer at shutdown: %v", err)
	}
	var r broker.Request
	if json.NewDecoder(resp.Body).Decode(&r); resp.StatusCode != 200 || r.State != broker.StatePending {
		t.Errorf("long poll at shutdown: %d %+v", resp.StatusCode, r)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if code, _, _ := e.do("GET", "/readyz", "", "", ""); code != http.StatusServiceUnavailable {
		t.Errorf("readyz after shutdown: %d, want 503", code)
	}
}
