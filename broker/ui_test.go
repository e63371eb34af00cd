package broker_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// browser is a client with a cookie jar, as the web page is.
type browser struct {
	t    testing.TB
	base string
	c    *http.Client
	me   broker.UIMe
}

func newBrowser(t testing.TB, ts *httptest.Server) *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := *ts.Client() // a copy: ts.Client() is shared
	c.Jar = jar
	return &browser{t: t, base: ts.URL, c: &c}
}

// do sends a request; hdr are extra headers as key, value pairs.
func (b *browser) do(method, path, ctype string, body []byte, hdr ...string) (int, http.Header, []byte) {
	b.t.Helper()
	req, err := http.NewRequest(method, b.base+path, bytes.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, out
}

func (b *browser) login(token string) int {
	b.t.Helper()
	body, _ := json.Marshal(map[string]string{"token": token})
	code, _, out := b.do("POST", "/ui/login", "application/json", body)
	if code == http.StatusOK {
		if err := json.Unmarshal(out, &b.me); err != nil {
			b.t.Fatal(err)
		}
	}
	return code
}

func TestUIPageHeaders(t *testing.T) {
	e := newEnv(t, nil)
	b := newBrowser(t, e.ts)
	for _, tc := range []struct {
		path, ctype string
		code        int
	}{
		{"/", "text/html", 200},
		{"/static/app.js", "text/javascript", 200},
		{"/static/app.css", "text/css", 200},
		{"/static/index.html", "text/html", 200},
		{"/static/nope.js", "application/json", 404},
		{"/static/doc.go", "application/json", 404},
		{"/static/..%2fweb.go", "application/json", 404},
		{"/index.html", "application/json", 404},
	} {
		code, h, body := b.do("GET", tc.path, "", nil)
		if code != tc.code || !strings.HasPrefix(h.Get("Content-Type"), tc.ctype) {
			t.Errorf("GET %s: %d %s, want %d %s", tc.path, code, h.Get("Content-Type"), tc.code, tc.ctype)
		}
		if code != 200 {
			continue
		}
		csp := h.Get("Content-Security-Policy")
		for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "default-src 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: CSP %q lacks %q", tc.path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("GET %s: CSP %q allows inline or eval", tc.path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: headers %v", tc.path, h)
		}
		if tc.path == "/" && (bytes.Contains(body, []byte("<script>")) || bytes.Contains(body, []byte(" on"+"click="))) {
			t.Errorf("index.html has inline script")
		}
	}
}

func TestUILogin(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		name, token string
		code        int
	}{
		{"owner", e.alice, 200},
		{"admin", e.admin, 200},
		{"agent", e.agentA, 403},
		{"unknown", "pyl_" + strings.Repeat("x", 43), 401},
		{"malformed", "Bearer " + e.alice, 401},
		{"empty", "", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBrowser(t, e.ts)
			if code := b.login(tc.token); code != tc.code {
				t.Fatalf("login: %d, want %d", code, tc.code)
			}
			code, _, _ := b.do("GET", "/v1/requests", "", nil)
			if want := map[bool]int{true: 200, false: 401}[tc.code == 200]; code != want {
				t.Errorf("GET /v1/requests after login %d: %d, want %d", tc.code, code, want)
			}
			if tc.code == 200 && len(b.me.CSRF) < 32 {
				t.Errorf("CSRF token %q too short", b.me.CSRF)
			}
		})
	}
	// Cross-origin sign-in is refused.
	b := newBrowser(t, e.ts)
	body, _ := json.Marshal(map[string]string{"token": e.alice})
	if code, _, _ := b.do("POST", "/ui/login", "application/json", body, "Origin", "https://evil.example"); code != 403 {
		t.Errorf("cross-origin login: %d, want 403", code)
	}
	// A form post (text/plain or urlencoded) is refused: only JSON signs in.
	if code, _, _ := b.do("POST", "/ui/login", "application/x-www-form-urlencoded", []byte("token="+e.alice)); code != 415 {
		t.Errorf("form login: %d, want 415", code)
	}
}

func TestUICookie(t *testing.T) {
	for _, tls := range []bool{false, true} {
		e := newEnv(t, nil)
		ts := e.ts
		if tls {
			ts = httptest.NewTLSServer(e.srv)
			defer ts.Close()
		}
		b := newBrowser(t, ts)
		body, _ := json.Marshal(map[string]string{"token": e.alice})
		_, h, _ := b.do("POST", "/ui/login", "application/json", body)
		c := h.Get("Set-Cookie")
		for _, want := range []string{broker.UICookie + "=", "HttpOnly", "SameSite=Strict", "Path=/"} {
			if !strings.Contains(c, want) {
				t.Errorf("tls=%v: Set-Cookie %q lacks %q", tls, c, want)
			}
		}
		if strings.Contains(c, "Secure") != tls {
			t.Errorf("tls=%v: Set-Cookie %q", tls, c)
		}
		if strings.Contains(c, e.alice) || strings.Contains(c, strings.TrimPrefix(e.alice, "pyl_")) {
			t.Error("the cookie carries the token")
		}
	}
}

// TestUICSRF: every change made with the cookie needs the session's CSRF token and the
// same origin; refused changes leave the store as it was.
func TestUICSRF(t *testing.T) {
	e := newEnv(t, nil)
	b := newBrowser(t, e.ts)
	if code := b.login(e.alice); code != 200 {
		t.Fatal(code)
	}
	other := newBrowser(t, e.ts)
	if code := other.login(e.alice); code != 200 {
		t.Fatal(code)
	}
	req := e.request(e.agentA, e.sesA, `"pend-x"`)
	path := "/v1/requests/" + req.ID + "/approve"
	before := e.snapshot()
	for _, tc := range []struct {
		name string
		hdr  []string
	}{
		{"no header", nil},
		{"empty header", []string{broker.CSRFHeader, ""}},
		{"wrong token", []string{broker.CSRFHeader, strings.Repeat("A", 43)}},
		{"another sign-in's token", []string{broker.CSRFHeader, other.me.CSRF}},
		{"cross origin", []string{broker.CSRFHeader, b.me.CSRF, "Origin", "http://evil.example"}},
	} {
		code, _, out := b.do("POST", path, "application/json", []byte(`{}`), tc.hdr...)
		if code != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 403", tc.name, code, out)
		}
	}
	e.unchanged("approvals without a valid CSRF token", before)
	// Reads need no CSRF header; the right header lets the change through.
	if code, _, _ := b.do("GET", "/v1/requests/"+req.ID, "", nil); code != 200 {
		t.Errorf("GET with cookie: %d", code)
	}
	code, _, out := b.do("POST", path, "application/json", []byte(`{}`), broker.CSRFHeader, b.me.CSRF, "Origin", b.base)
	if code != 200 {
		t.Fatalf("approve with CSRF: %d %s", code, out)
	}
	var got broker.Request
	if err := json.Unmarshal(out, &got); err != nil || got.State != broker.StateApproved || got.Approver != "alice" {
		t.Errorf("approved request %+v (%v)", got, err)
	}
	// Bob's session is not alice's, with a cookie as with a bearer token.
	rb := e.request(e.agentB, e.sesB, `"pend-y"`)
	if code, _, _ := b.do("POST", "/v1/requests/"+rb.ID+"/deny", "application/json", []byte(`{"reason":"no"}`), broker.CSRFHeader, b.me.CSRF); code != 403 {
		t.Errorf("alice denying bob's request: %d, want 403", code)
	}
	// gc stays admin-only.
	if code, _, _ := b.do("POST", "/v1/gc", "", nil, broker.CSRFHeader, b.me.CSRF); code != 403 {
		t.Errorf("owner gc by cookie: %d, want 403", code)
	}
}

func TestUIUploadPends(t *testing.T) {
	e := newEnv(t, nil)
	b := newBrowser(t, e.ts)
	if code := b.login(e.alice); code != 200 {
		t.Fatal(code)
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile(broker.UploadField, "up-1.0-py3-none-any.whl")
	fw.Write([]byte(wheelBytes(t, "up", "1.0", nil)))
	mw.Close()
	if code, _, _ := b.do("POST", "/v1/sessions/"+e.sesA+"/requests", mw.FormDataContentType(), body.Bytes()); code != 403 {
		t.Errorf("upload without CSRF: %d, want 403", code)
	}
	code, _, out := b.do("POST", "/v1/sessions/"+e.sesA+"/requests", mw.FormDataContentType(), body.Bytes(), broker.CSRFHeader, b.me.CSRF)
	var r broker.Request
	if code != 201 || json.Unmarshal(out, &r) != nil || r.State != broker.StatePending || r.Upload != "up-1.0-py3-none-any.whl" {
		t.Errorf("owner upload: %d %s, want 201 pending", code, out)
	}
}

func TestUISessionEnds(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	e := newEnv(t, func(o *broker.Options) { o.Now = func() time.Time { return clock() } })
	b := newBrowser(t, e.ts)
	if code := b.login(e.alice); code != 200 {
		t.Fatal(code)
	}
	if code, _, _ := b.do("GET", "/ui/me", "", nil); code != 200 {
		t.Fatalf("/ui/me: %d", code)
	}
	// Logout needs the CSRF header, then the cookie is dead.
	if code, _, _ := b.do("POST", "/ui/logout", "", nil); code != 403 {
		t.Errorf("logout without CSRF: %d, want 403", code)
	}
	if code, _, _ := b.do("POST", "/ui/logout", "", nil, broker.CSRFHeader, b.me.CSRF); code != 200 {
		t.Errorf("logout: %d", code)
	}
	if code, _, _ := b.do("GET", "/v1/requests", "", nil); code != 401 {
		t.Errorf("after logout: %d, want 401", code)
	}
	// Expiry.
	if code := b.login(e.alice); code != 200 {
		t.Fatal(code)
	}
	now = now.Add(broker.UISessionTTL + time.Second)
	if code, _, _ := b.do("GET", "/v1/requests", "", nil); code != 401 {
		t.Errorf("after expiry: %d, want 401", code)
	}
}

func TestUIVersion(t *testing.T) {
	e := newEnv(t, nil)
	b := newBrowser(t, e.ts)
	if code := b.login(e.admin); code != 200 {
		t.Fatal(code)
	}
	version := func() int64 {
		var v struct{ Version int64 }
		_, _, out := b.do("GET", "/ui/version", "", nil)
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatal(err)
		}
		return v.Version
	}
	v0 := version()
	req := e.request(e.agentA, e.sesA, `"pend-z"`) // an agent's request moves it
	v1 := version()
	if v1 <= v0 {
		t.Errorf("version %d after a request, was %d", v1, v0)
	}
	e.srv.Notify(req.ID) // so does the builder
	if v2 := version(); v2 <= v1 {
		t.Errorf("version %d after Notify, was %d", v2, v1)
	}
	if code, _, _ := e.do("GET", "/ui/version", e.agentA, "", ""); code != 403 {
		t.Errorf("agent reading /ui/version: %d, want 403", code)
	}
}

// FuzzUILogin: no body signs in, crashes the server or answers 500.
func FuzzUILogin(f *testing.F) {
	for _, s := range []string{`{"token":"pyl_x"}`, `{}`, `{"token":1}`, `{"token":"` + strings.Repeat("a", 300) + `"}`, `[`, ``} {
		f.Add(s)
	}
	e := newEnv(f, nil)
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest("POST", "/ui/login", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		if rec.Code == 200 || rec.Code >= 500 {
			t.Fatalf("login with %q: %d %s", body, rec.Code, rec.Body)
		}
	})
}
