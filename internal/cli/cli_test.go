//go:build !lean

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/test/fixture"
)

// env is one in-process host: a cache, a home, a plain PEP 503 index of fixture wheels and
// no pylayer variables from the caller's environment.
type env struct {
	t     *testing.T
	home  string
	cache string
	index string // simple-API URL
}

func newEnv(t *testing.T) *env {
	t.Helper()
	for _, v := range []string{"PYLAYER_INDEX_URL", "PYLAYER_REPO", "PYLAYER_TRUST", "PYLAYER_DB", "PYLAYER_BROKER", "PYLAYER_TOKEN", "PYLAYER_CACHE", "PYLAYER_SANDBOX_USER"} {
		t.Setenv(v, "")
	}
	t.Setenv("COSIGN_PASSWORD", "pw")
	e := &env{t: t, home: t.TempDir(), cache: t.TempDir()}
	idx := t.TempDir()
	for _, w := range []fixture.Wheel{{Name: "pin", Version: "1.0"}, {Name: "foo", Version: "1.0", RequiresDist: []string{"pin"}}} {
		if _, err := w.Write(idx); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(fixture.PlainIndex(idx))
	t.Cleanup(srv.Close)
	e.index = srv.URL + "/simple/"
	return e
}

func (e *env) path(name string) string { return filepath.Join(e.home, name) }

// run runs pylayer with args in process; the cache is always the env's.
func (e *env) run(args ...string) (stdout, stderr string, err error) {
	cmd := New()
	var o, se bytes.Buffer
	cmd.SetOut(&o)
	cmd.SetErr(&se)
	cmd.SetIn(strings.NewReader(""))
	cmd.SetArgs(append([]string{"--cache", e.cache}, args...))
	err = cmd.ExecuteContext(context.Background())
	return o.String(), se.String(), err
}

// must runs args, fails the test on error, and decodes --json output into out.
func (e *env) must(out any, args ...string) string {
	e.t.Helper()
	stdout, stderr, err := e.run(args...)
	if err != nil {
		e.t.Fatalf("pylayer %s: %v\nstderr: %s", strings.Join(args, " "), err, stderr)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(stdout), out); err != nil {
			e.t.Fatalf("pylayer %s printed %q: %v", strings.Join(args, " "), stdout, err)
		}
	}
	if slices.Contains(args, "--json") {
		checkSnakeCase(e.t, strings.Join(args, " "), stdout)
	}
	return strings.TrimSpace(stdout)
}

// checkSnakeCase fails t when the JSON document has an object key with an upper-case
// letter: every --json output uses snake_case keys (data keys such as annotation names
// are lower-case too).
func checkSnakeCase(t testing.TB, what, doc string) {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("%s --json printed %q: %v", what, doc, err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				if strings.ToLower(k) != k || strings.Contains(k, " ") {
					t.Errorf("%s --json: key %q at %s is not snake_case", what, k, path)
				}
				walk(path+"."+k, c)
			}
		case []any:
			for i, c := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), c)
			}
		}
	}
	walk("$", v)
}

var tgtFlags = []string{"--python", "3.11", "--platform", "manylinux_2_28_x86_64"}

func args(parts ...any) []string {
	var out []string
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			out = append(out, v)
		case []string:
			out = append(out, v...)
		}
	}
	return out
}

// TestErrors: every command refuses wrong flags and arguments with a message that says
// what to give, before doing any work, and prints nothing on stdout.
func TestErrors(t *testing.T) {
	e := newEnv(t)
	os.WriteFile(e.path("base.lock.json"), []byte("{}"), 0o644)
	tests := []struct {
		args []string
		want string // in the error
	}{
		{args("lock", "pin", "--index-url", e.index, tgtFlags), "-o FILE is required"},
		{args("lock", "pin", "-o", e.path("l.json"), tgtFlags), "--index-url is required"},
		{args("lock", "pin", "--index-url", e.index, "--kind", "fat", "-o", e.path("l.json"), tgtFlags), `unknown layer kind "fat"`},
		{args("lock", "--index-url", e.index, "-o", e.path("l.json"), tgtFlags), "nothing to lock"},
		{args("lock", "pin", "--index-url", e.index, "--kind", "ext", "-o", e.path("l.json"), tgtFlags), "an ext layer needs its base"},
		{args("lock", "pin", "--index-url", e.index, "--python", "3.11", "-o", e.path("l.json")), "--python and --platform go together"},
		{args("lock", "pin", "--index-url", e.index, "-o", e.path("l.json")), "no target"},
		{args("lock", "nosuch", "--index-url", e.index, "-o", e.path("l.json"), tgtFlags), "cannot lock"},
		{args("lock", "pin", "--index-url", e.index, "--python-from", "/nonexistent/python3", "--python", "3.11", "-o", e.path("l.json")), "not both"},
		{args("build", e.path("base.lock.json"), "-o", e.path("out")), "want oci:DIR"},
		{args("build", e.path("nosuch.json"), "-o", "oci:"+e.path("out")), "nosuch.json"},
		{args("build"), "accepts 1 arg"},
		{args("export", e.path("base.lock.json")), `required flag(s) "format" not set`},
		{args("export", e.path("nosuch.json"), "--format", "pylock"), "nosuch.json"},
		{args("export", e.path("base.lock.json"), "--format", "poetry"), ""},
		{args("publish", e.path("base.lock.json"), "--key", "k"), "--repo is required"},
		{args("publish", e.path("base.lock.json"), "--repo", "oci:"+e.path("r")), "--key is required"},
		{args("interpreter", "publish", e.home), "--repo and --key are required"},
		{args("pull", "oci:"+e.path("nosuch")+":t"), ""},
		{args("verify", "not a ref!"), ""},
		{args("keygen", "extra"), "unknown command"},
		{args("serve"), "--db is required"},
		{args("token", "create", "--role", "owner", "--subject", "a"), "--db and --subject are required"},
		{args("token", "create", "--db", e.path("b.db"), "--role", "agent", "--subject", "a"), `--role "agent"`},
		{args("token", "create", "extra", "--db", e.path("b.db"), "--subject", "a"), "unknown command"},
		{args("run", "--session", "s", "--python", "oci:x:y", "--", "true"), "drop --python and --layer"},
		{args("run", "--session", "s", "--", "true"), "--session needs the broker"},
		{args("run", "--session", "s", "--broker", "http://127.0.0.1:1", "--", "true"), "PYLAYER_TOKEN"},
		{args("run", "--memory", "lots", "--", "true"), "--memory"},
		{args("run"), "requires at least 1 arg"},
		{args("index", "serve", e.path("nosuch")), "index directory"},
		{args("ensure", "extra"), "unknown command"},
		{args("gc", "--max-bytes", "x"), "invalid argument"},
		{args("nosuch"), "unknown command"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, _, err := e.run(tc.args...)
			if err == nil {
				t.Fatalf("succeeded, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
			if stdout != "" {
				t.Errorf("printed %q on stdout on error", stdout)
			}
		})
	}
}

// TestLockBuildPublishVerifyPull drives the whole path in process against a plain PEP 503
// index and an OCI layout: every command's --json output, and that doing it again reuses.
func TestLockBuildPublishVerifyPull(t *testing.T) {
	e := newEnv(t)
	var keys struct{ PrivateKey, PublicKey string }
	prefix := e.path("cosign")
	if _, _, err := e.run("keygen", "--output-key-prefix", prefix); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.run("keygen", "--output-key-prefix", prefix); err == nil || !strings.Contains(err.Error(), "not overwriting") {
		t.Errorf("second keygen: %v, want a refusal to overwrite", err)
	}
	keys.PrivateKey, keys.PublicKey = prefix+".key", prefix+".pub"

	var base struct {
		Key, Lock, Kind string
		Packages        []struct{ Name, Version string }
	}
	key := e.must(nil, args("lock", "pin", "--index-url", e.index, tgtFlags, "-o", e.path("base.lock.json"))...)
	e.must(&base, args("lock", "pin", "--index-url", e.index, tgtFlags, "-o", e.path("base.lock.json"), "--json")...)
	if base.Key != key || len(key) != 64 || base.Kind != "base" || len(base.Packages) != 1 || base.Packages[0].Name != "pin" {
		t.Fatalf("lock --json: %+v (text printed %q)", base, key)
	}
	var ext struct{ Key, Kind, Base string }
	e.must(&ext, "lock", "foo", "--index-url", e.index, "-c", e.path("base.lock.json"), "--kind", "ext", "-o", e.path("foo.lock.json"), "--json")
	if ext.Kind != "ext" || ext.Base != base.Key {
		t.Fatalf("ext lock --json: %+v, want kind ext over %s", ext, base.Key)
	}

	layout := "oci:" + e.path("layout")
	var built struct {
		Digest, Tag, Key string
		Built            bool
	}
	e.must(&built, "build", e.path("base.lock.json"), "-o", layout, "--index-url", e.index, "--json")
	if !built.Built || built.Key != base.Key || built.Tag != "base-"+base.Key || !strings.HasPrefix(built.Digest, "sha256:") {
		t.Fatalf("build --json: %+v", built)
	}
	var again struct {
		Digest string
		Built  bool
	}
	e.must(&again, "build", e.path("base.lock.json"), "-o", layout, "--json")
	if again.Built || again.Digest != built.Digest {
		t.Errorf("second build: %+v, want the first's digest %s, not built again", again, built.Digest)
	}

	repo := "oci:" + e.path("repo")
	var pub struct {
		Ref, Digest, Tag, Key string
		SignedBy              string `json:"signed_by"`
		Pushed                bool
	}
	e.must(&pub, "publish", e.path("base.lock.json"), "--repo", repo, "--key", keys.PrivateKey, "--index-url", e.index, "--tag", "current", "--json")
	if !pub.Pushed || pub.SignedBy == "" || pub.Digest != built.Digest || pub.Ref != repo+"@"+pub.Digest || pub.Key != base.Key {
		t.Fatalf("publish --json: %+v, want pushed %s (the built digest)", pub, built.Digest)
	}
	if ref := e.must(nil, "publish", e.path("base.lock.json"), "--repo", repo, "--key", keys.PrivateKey); ref != pub.Ref {
		t.Errorf("second publish printed %q, want %q", ref, pub.Ref)
	}
	if _, _, err := e.run("publish", e.path("base.lock.json"), "--repo", repo+":tag", "--key", keys.PrivateKey); err == nil || !strings.Contains(err.Error(), "give the repository only") {
		t.Errorf("publish to a tag: %v, want a refusal", err)
	}

	var ver struct {
		Ref, Kind, Key string
		Verified       bool
		Consistent     bool
		SignedBy       []string `json:"signed_by"`
	}
	e.must(&ver, "verify", repo+":current", "--trust", keys.PublicKey, "--json")
	if !ver.Verified || !ver.Consistent || ver.Kind != "base" || ver.Key != base.Key || len(ver.SignedBy) != 1 || ver.Ref != pub.Ref {
		t.Errorf("verify --json: %+v", ver)
	}
	if _, _, err := e.run("verify", repo+":current"); err == nil {
		t.Error("verify without a trust policy succeeded")
	}

	var pulled struct {
		Root, Digest string
		Verified     bool
	}
	// -v logs every blob fetched (then, once installed, nothing is fetched again).
	if _, stderr, err := e.run("pull", repo+":current", "--trust", keys.PublicKey, "-v"); err != nil || !strings.Contains(stderr, `msg="blob fetched"`) || !strings.Contains(stderr, "title=") {
		t.Fatalf("pull -v: %v, stderr %q; want a blob fetched line per blob", err, stderr)
	}
	e.must(&pulled, "pull", repo+":current", "--trust", keys.PublicKey, "--json")
	if !pulled.Verified || pulled.Digest != pub.Digest {
		t.Fatalf("pull --json: %+v", pulled)
	}
	if _, err := os.Stat(filepath.Join(pulled.Root, "site-packages")); err != nil {
		t.Errorf("the pulled layer root has no site-packages: %v", err)
	}
	var ls []struct {
		Digest string
		Refs   []string
	}
	e.must(&ls, "ls", "--json")
	if len(ls) != 1 || ls[0].Digest != pub.Digest || len(ls[0].Refs) == 0 {
		t.Errorf("ls --json: %+v, want the pulled layer with its refs", ls)
	}
	var gc struct {
		Kept []string
	}
	e.must(&gc, "gc", "--json")
	if len(gc.Kept) != 1 {
		t.Errorf("gc --json: %+v, want the referenced layer kept", gc)
	}
}

// TestTokenCreate: the token is printed once, with --json its role and subject too.
func TestTokenCreate(t *testing.T) {
	e := newEnv(t)
	db := e.path("broker.db")
	tok := e.must(nil, "token", "create", "--db", db, "--subject", "alice")
	if len(tok) < 20 || strings.ContainsAny(tok, " \n") {
		t.Errorf("token create printed %q", tok)
	}
	var j struct{ Token, Role, Subject string }
	e.must(&j, "token", "create", "--db", db, "--role", "admin", "--subject", "root", "--json")
	if j.Role != "admin" || j.Subject != "root" || j.Token == tok || len(j.Token) < 20 {
		t.Errorf("token create --json: %+v", j)
	}
}

// TestMainErrors: errors go to stderr, as text, or with --json as {"error", "hint"};
// stdout stays empty and the status is 1.
func TestMainErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		json bool
	}{
		{[]string{"export", "/nonexistent/l.json", "--format", "pylock"}, false},
		{[]string{"export", "/nonexistent/l.json", "--format", "pylock", "--json"}, true},
		{[]string{"--json", "lock", "pin"}, true},
	} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), tt.args, &out, &errb)
		if code != 1 || out.Len() != 0 {
			t.Errorf("%v: status %d, stdout %q; want 1 and nothing", tt.args, code, out.String())
		}
		if !tt.json {
			if !strings.HasPrefix(errb.String(), "pylayer: error: ") {
				t.Errorf("%v: stderr %q", tt.args, errb.String())
			}
			continue
		}
		var e struct{ Error, Hint string }
		if err := json.Unmarshal(errb.Bytes(), &e); err != nil || e.Error == "" {
			t.Errorf("%v: stderr %q is not a JSON error (%v)", tt.args, errb.String(), err)
		}
		checkSnakeCase(t, strings.Join(tt.args, " "), errb.String())
	}
}
