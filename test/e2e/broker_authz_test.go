package e2e

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/client"
	"github.com/pylayer/pylayer/test/fixture"
)

// brokerAuthz checks every refusal by status code and by its absence of side effects: the
// session's requests and bindings and the pending request's state are the same after.
func brokerAuthz(t *testing.T, d *bkDeploy) {
	s := d.serve
	z, other := s.newSession(t, d.owner), s.newSession(t, d.owner)
	p := s.ask(t, z, "offlist2==1.0")
	if p.State != "pending" {
		t.Fatalf("off-list request: %s, want pending", p.State)
	}
	snapshot := func() string {
		e := s.env(t, d.admin, z.ID)
		reqs := d.requests(t, z.ID)
		b, _ := json.Marshal([]any{e.Bindings, reqs})
		return string(b)
	}
	before := snapshot()
	const badToken = "plt_e2e-not-a-real-token-0123456789abcdef"
	pkgs := map[string]any{"packages": []string{"foo==1.0"}}
	for _, c := range []struct {
		name         string
		method, path string
		token        string
		body         any
		want         int
	}{
		{"no token, request", "POST", "/v1/sessions/" + z.ID + "/requests", "", pkgs, http.StatusUnauthorized},
		{"no token, env", "GET", "/v1/sessions/" + z.ID + "/env", "", nil, http.StatusUnauthorized},
		{"bad token, request", "POST", "/v1/sessions/" + z.ID + "/requests", badToken, pkgs, http.StatusUnauthorized},
		{"bad token, approve", "POST", "/v1/requests/" + p.ID + "/approve", badToken, nil, http.StatusUnauthorized},
		{"agent on another session, request", "POST", "/v1/sessions/" + z.ID + "/requests", other.Agent, pkgs, http.StatusForbidden},
		{"agent on another session, env", "GET", "/v1/sessions/" + z.ID + "/env", other.Agent, nil, http.StatusForbidden},
		{"agent on another session, poll", "GET", "/v1/requests/" + p.ID, other.Agent, nil, http.StatusForbidden},
		{"agent approving its own request", "POST", "/v1/requests/" + p.ID + "/approve", z.Agent, nil, http.StatusForbidden},
		{"agent denying", "POST", "/v1/requests/" + p.ID + "/deny", z.Agent, map[string]string{"reason": "x"}, http.StatusForbidden},
		{"agent creating a session", "POST", "/v1/sessions", z.Agent, nil, http.StatusForbidden},
		{"agent rebasing", "POST", "/v1/sessions/" + z.ID + "/rebase", z.Agent, nil, http.StatusForbidden},
		{"another owner approving", "POST", "/v1/requests/" + p.ID + "/approve", d.owner2, nil, http.StatusForbidden},
		{"another owner denying", "POST", "/v1/requests/" + p.ID + "/deny", d.owner2, map[string]string{"reason": "x"}, http.StatusForbidden},
		{"another owner reading env", "GET", "/v1/sessions/" + z.ID + "/env", d.owner2, nil, http.StatusForbidden},
		{"another owner rebasing", "POST", "/v1/sessions/" + z.ID + "/rebase", d.owner2, nil, http.StatusForbidden},
		{"another owner reading audit", "GET", "/v1/audit?session=" + z.ID, d.owner2, nil, http.StatusForbidden},
	} {
		code, body := s.call(t, c.method, c.path, c.token, c.body)
		if code != c.want {
			t.Errorf("%s: %d, want %d\n%s", c.name, code, c.want, body)
		}
		if !json.Valid(body) {
			t.Errorf("%s: answer is not JSON: %q", c.name, body)
		}
		if after := snapshot(); after != before {
			t.Fatalf("%s changed the session:\nbefore %s\nafter  %s", c.name, before, after)
		}
	}
	still := s.request(t, z.Agent, p.ID, 0)
	if still.State != "pending" || still.Approver != "" {
		t.Fatalf("after the refusals the request is %s, approver %q; want pending, none", still.State, still.Approver)
	}
	// bob's pending list does not show alice's request.
	if hasRequest(s.list(t, d.owner2, client.Filter{State: broker.StatePending}), p.ID) {
		t.Errorf("bob's pending list shows alice's request %s", p.ID)
	}
	if strings.Contains(s.stderr.String(), badToken) || strings.Contains(s.stderr.String(), z.Agent) {
		t.Errorf("a token appears in the broker's log")
	}
}

// brokerBadInput sends malformed requests: each gets a clear 4xx and nothing is stored.
func brokerBadInput(t *testing.T, d *bkDeploy) {
	s := d.serve
	z := s.newSession(t, d.owner)
	uploads := filepath.Join(filepath.Dir(d.db), "uploads")
	countFiles := func() int {
		n := 0
		filepath.WalkDir(uploads, func(_ string, de fs.DirEntry, err error) error {
			if err == nil && !de.IsDir() {
				n++
			}
			return nil
		})
		return n
	}
	storedBefore := countFiles()
	good, err := fixture.Wheel{Name: "uploaded", Version: "1.0"}.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	path := "/v1/sessions/" + z.ID + "/requests"
	big := bytes.Repeat([]byte(" "), 2<<20)
	copy(big, `{"packages": ["foo==1.0"]`)
	big[len(big)-1] = '}'
	type tc struct {
		name, ctype string
		body        []byte
		want        int
		says        string
	}
	cases := []tc{
		{"malformed JSON", "application/json", []byte(`{"packages": ["foo"`), 400, "malformed JSON"},
		{"unknown field", "application/json", []byte(`{"packages": ["foo"], "force": true}`), 400, "force"},
		{"oversized body", "application/json", big, 413, "larger than"},
		{"wrong content type", "text/plain", []byte(`foo==1.0`), 415, "Content-Type"},
		{"no packages", "application/json", []byte(`{"packages": []}`), 400, "no packages"},
		{"invalid requirement", "application/json", []byte(`{"packages": ["foo=="]}`), 400, "foo=="},
		{"invalid requirement 2", "application/json", []byte(`{"packages": ["foo >>> 1"]}`), 400, "foo >>> 1"},
		{"direct URL", "application/json", []byte(`{"packages": ["foo @ https://example.com/foo-1.0-py3-none-any.whl"]}`), 400, "direct URL"},
	}
	for _, c := range []struct{ name, file, says string }{
		{"upload not a wheel", "notawheel-1.0-py3-none-any.whl", "not a zip"},
		{"upload with a path", "../../etc/uploaded-1.0-py3-none-any.whl", "path separator"},
		{"upload with a backslash path", `..\uploaded-1.0-py3-none-any.whl`, "path separator"},
		{"upload not named like a wheel", "uploaded.zip", ""},
	} {
		data := good
		if c.name == "upload not a wheel" {
			data = []byte("#!/bin/sh\necho this is no wheel\n")
		}
		ctype, body := multipartWheel(c.file, data)
		cases = append(cases, tc{c.name, ctype, body, 400, c.says})
	}
	for _, c := range cases {
		code, body := s.raw(t, "POST", path, z.Agent, c.ctype, bytes.NewReader(c.body))
		var e struct{ Error string }
		if code != c.want || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, c.says) {
			t.Errorf("%s: %d %s, want %d with an error saying %q", c.name, code, body, c.want, c.says)
		}
	}
	if reqs := d.requests(t, z.ID); len(reqs) != 0 {
		t.Errorf("bad input stored %d requests: %+v", len(reqs), reqs)
	}
	if n := countFiles(); n != storedBefore {
		t.Errorf("bad uploads left %d files under %s (had %d)", n, uploads, storedBefore)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(d.db), "etc")); err == nil {
		t.Errorf("an upload wrote outside the uploads directory")
	}
	// A good upload is stored and waits for an approver: user-uploaded wheels always do.
	ctype, body := multipartWheel(fixture.Wheel{Name: "uploaded", Version: "1.0"}.Filename(), good)
	code, ans := s.raw(t, "POST", path, z.Agent, ctype, bytes.NewReader(body))
	var r bkRequest
	if code != http.StatusCreated || json.Unmarshal(ans, &r) != nil || r.State != "pending" {
		t.Fatalf("a good upload: %d %s, want 201 pending", code, ans)
	}
	if n := countFiles(); n != storedBefore+1 {
		t.Errorf("a good upload: %d files under %s, want %d", n, uploads, storedBefore+1)
	}
}
