package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/test/fixture"
)

func TestRedactPaths(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"open /var/lib/pylayer/uploads/ses_1/ab/x-1.0-py3-none-any.whl: no such file", "open x-1.0-py3-none-any.whl: no such file"},
		{"/tmp/build-123/tree: exists", "tree: exists"},
		{`copying "/a/b/c.whl" to (/d/e)`, `copying "c.whl" to (e)`},
		{"path=/srv/data/f,other=/x", "path=f,other=x"},
		{"pushing to oci:/srv/layout: denied", "pushing to oci:layout: denied"},
		{"downloading https://files.example/packages/x.whl: 404", "downloading https://files.example/packages/x.whl: 404"},
		{"registry 127.0.0.1:5000/team/layers: unauthorized", "registry 127.0.0.1:5000/team/layers: unauthorized"},
		{"a relative/path and numpy>=1/2", "a relative/path and numpy>=1/2"},
		{"root is / here", "root is … here"},
		{"sha256:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("a", 64)},
		{"no slash at all", "no slash at all"},
	} {
		if got := broker.RedactPaths(tc.in); got != tc.want {
			t.Errorf("RedactPaths(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	err := broker.RedactError(&fs.PathError{Op: "open", Path: "/var/cache/x.whl", Err: fs.ErrNotExist})
	if err.Error() != "open x.whl: file does not exist" || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("RedactError: %q (is ErrNotExist: %v)", err, errors.Is(err, fs.ErrNotExist))
	}
}

// FuzzRedactPaths: no absolute path of two or more components survives, outside URLs.
func FuzzRedactPaths(f *testing.F) {
	for _, s := range []string{"open /a/b: x", "https://h/a/b", "oci:/x/y", "x=/a/b", "(/a/b)"} {
		f.Add(s)
	}
	left := regexp.MustCompile(`(^|[\s"'(=,])/[^\s"'()\[\]<>,;:/]+/[^\s"'()\[\]<>,;:]`)
	f.Fuzz(func(t *testing.T, s string) {
		if got := broker.RedactPaths(s); left.MatchString(got) {
			t.Fatalf("RedactPaths(%q) = %q keeps a path", s, got)
		}
	})
}

// TestNoHostPath walks every error an upload and a bad request can get, and what the API
// shows of requests whose classifier and builder put host paths in their reasons and
// errors, and finds no host path in any answer.
func TestNoHostPath(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) {
		o.MaxUpload, o.MaxBody, o.Quota.Count = 4096, 4096, 2
		o.Layers, o.GC = fakeLayers{}, fakeLayers{}
	})
	ctx := context.Background()
	root := filepath.Dir(e.dataDir) // the test's temporary directory: store, data dir
	hostPath := regexp.MustCompile(`(^|[\s"'(=,:])/[A-Za-z0-9._-]+/[^\s"']*`)
	var answers int
	check := func(what string, code int, body []byte) {
		t.Helper()
		answers++
		s := string(body)
		for _, p := range []string{root, e.dataDir, os.TempDir() + "/", "/uploads/", ".incoming", "/wheels/"} {
			if strings.Contains(s, p) {
				t.Errorf("%s (%d) shows %q: %s", what, code, p, s)
			}
		}
		var v struct {
			Error, Hint string
			Reasons     []string
			Requests    []broker.Request
			Events      []broker.AuditEvent
		}
		json.Unmarshal(body, &v)
		texts := append([]string{v.Error}, v.Reasons...)
		for _, r := range v.Requests {
			texts = append(append(texts, r.Error), r.Reasons...)
		}
		for _, ev := range v.Events {
			texts = append(texts, ev.Detail)
		}
		for _, x := range texts {
			if m := hostPath.FindString(x); m != "" && !strings.HasPrefix(strings.TrimSpace(m), "/v") {
				t.Errorf("%s (%d) shows the path %q in %q", what, code, m, x)
			}
		}
	}
	reqs := "/v1/sessions/" + e.sesA + "/requests"
	const name = "demo_pkg-1.0-py3-none-any.whl"
	good := wheelBytes(t, "demo-pkg", "1.0", nil)
	noMeta := wheelBytes(t, "demo-pkg", "1.0", func(m []fixture.File) []fixture.File {
		for i := range m {
			if strings.HasSuffix(m[i].Path, "/METADATA") {
				m[i].Data = []byte("Metadata-Version: 2.1\nName: demo-pkg\n") // no Version
			}
		}
		return m
	})
	uploads := [][][3]string{
		{{"wheel", "../../" + name, good}},
		{{"wheel", "demo.tar.gz", good}},
		{{"file", name, good}},
		{{"wheel", name, "hello"}},
		{{"wheel", name, "PK\x03\x04 pretend zip"}},
		{{"wheel", name, wheelBytes(t, "demo-pkg", "1.0", func(m []fixture.File) []fixture.File { return m[:1] })}},
		{{"wheel", name, noMeta}},
		{{"wheel", name, wheelBytes(t, "other", "1.0", nil)}},
		{{"wheel", name, good}, {"wheel", name, good}},
		{{"wheel", name, "PK\x03\x04" + strings.Repeat("x", 5000)}},
		nil,
		{{"wheel", "boom-1.0-py3-none-any.whl", wheelBytes(t, "boom", "1.0", nil)}},     // classifier error
		{{"wheel", "deny_x-1.0-py3-none-any.whl", wheelBytes(t, "deny_x", "1.0", nil)}}, // rejected, path in reason
		{{"wheel", name, good}},
		{{"wheel", "two-1.0-py3-none-any.whl", wheelBytes(t, "two", "1.0", nil)}},
		{{"wheel", "three-1.0-py3-none-any.whl", wheelBytes(t, "three", "1.0", nil)}}, // over the count quota
	}
	for i, parts := range uploads {
		ct, body := multipartBody(t, parts...)
		code, _, b := e.do("POST", reqs, e.agentA, ct, body)
		check("upload "+string(rune('a'+i)), code, b)
	}
	js := "application/json"
	pend := e.request(e.agentA, e.sesA, `"pendme"`)
	for _, tc := range []struct{ method, path, token, ctype, body string }{
		{"POST", reqs, e.agentA, js, `{"packages":`},
		{"POST", reqs, e.agentA, js, `{"packages":["a"],"x":1}`},
		{"POST", reqs, e.agentA, js, `{"packages":[]}`},
		{"POST", reqs, e.agentA, js, `{"packages":["foo>=>1"]}`},
		{"POST", reqs, e.agentA, js, `{"packages":["foo @ file:///etc/passwd"]}`},
		{"POST", reqs, e.agentA, js, `{"packages":["` + strings.Repeat("a", 5000) + `"]}`},
		{"POST", reqs, e.agentA, "text/plain", `x`},
		{"POST", reqs, e.agentA, js, `{"packages":["boom"]}`},
		{"POST", reqs, e.agentA, js, `{"packages":["deny"]}`},
		{"POST", "/v1/sessions/ses_nope/requests", e.admin, js, `{"packages":["a"]}`},
		{"POST", "/v1/requests/" + pend.ID + "/deny", e.alice, js, `{}`},
		{"POST", "/v1/requests/" + pend.ID + "/approve", e.alice, js, `{"isolated":true}`},
		{"GET", "/v1/requests/" + pend.ID + "?wait=soon", e.agentA, "", ""},
		{"GET", "/v1/requests?state=nope", e.alice, "", ""},
		{"POST", "/v1/sessions", e.alice, js, `{"base_lock":{"version":1}}`},
		{"DELETE", "/v1/sessions", e.admin, "", ""},
		{"GET", "/v2/nothing", e.admin, "", ""},
		{"GET", "/v1/requests", "pyl_" + strings.Repeat("x", 43), "", ""},
	} {
		code, _, b := e.do(tc.method, tc.path, tc.token, tc.ctype, tc.body)
		check(tc.method+" "+tc.path, code, b)
	}
	// A builder that failed with its cache paths in the error; an audit event with one.
	leak := "installing /var/cache/pylayer/build/wheels/ab12/x-1.0-py3-none-any.whl: open " + e.dataDir + "/t: permission denied"
	if err := e.store.UpdateRequest(ctx, pend.ID, func(q *broker.Request) error {
		q.State, q.Error, q.Reasons = broker.StateFailed, leak, append(q.Reasons, "resolved in "+root)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Audit(ctx, broker.AuditEvent{Time: pend.Created, Actor: "builder", Action: "build-failed", SessionID: e.sesA, RequestID: pend.ID, Detail: leak}); err != nil {
		t.Fatal(err)
	}
	open := e.request(e.agentA, e.sesA, `"pendtoo"`)
	if err := e.store.UpdateRequest(ctx, open.ID, func(q *broker.Request) error {
		q.Reasons = []string{"lock written to " + root + "/x.lock.json"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/v1/requests/" + pend.ID, "/v1/requests/" + pend.ID + "?wait=1s", "/v1/requests", "/v1/audit",
		"/v1/sessions/" + e.sesA + "/env", "/v1/requests/" + open.ID} {
		code, _, b := e.do("GET", p, e.alice, "", "")
		check("GET "+p, code, b)
	}
	code, _, b := e.do("POST", "/v1/gc", e.admin, "", "")
	check("POST /v1/gc", code, b)
	if answers < 40 {
		t.Errorf("only %d answers checked", answers)
	}
	// The checks can fail: the leaks are in the store as written.
	raw, _ := e.store.GetRequest(ctx, pend.ID)
	if !strings.Contains(raw.Error, e.dataDir) {
		t.Fatalf("the stored error lost its path: the test checks nothing")
	}
}
