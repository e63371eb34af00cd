package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/client"
	"github.com/pylayer/pylayer/test/fixture"
	registrytest "github.com/pylayer/pylayer/test/registry"
)

// The helpers of the broker suites (broker_*_test.go): a package index with the fixture
// wheels of the broker issue behind a proxy that can tamper with or stall one file, a
// deployment (repository, signing key, base layer tagged current, catalog), a `pylayer
// serve` process that can be killed and restarted on the same database, and a JSON client.
//
// The index, in two steps so that the base is locked before newer versions exist:
//
//	before the base lock: pin 1.0
//	after it:             pin 2.0; foo 1.0, 2.0; needpin2 (pin>=2), needpin1 (pin<2);
//	                      offlist, offlist2 (not allowlisted); evil (denylisted);
//	                      sdistonly (sdist only); tampered (served with other bytes)
//
// The base requirement is a bare "pin", so an isolated layer for needpin2 resolves
// (pin 2.0), as it would for a package released after the base was curated.

// bkCatalog allowlists what the suites auto-approve and denylists evil.
const bkCatalog = `{
  "base": ["pin"],
  "allow": [{"name": "foo"}, {"name": "needpin1"}, {"name": "needpin2"}, {"name": "sdistonly"},
            {"name": "tampered"}, {"name": "big"}],
  "deny": ["evil"]
}`

// bkProxy fronts pylayer index serve: downloads of tampered files get one byte flipped
// (same size, so only the hash check can notice), downloads of stalled files wait first.
type bkProxy struct {
	URL string // the proxy's simple-API URL, http://127.0.0.1:PORT/simple/

	mu      sync.Mutex
	tamper  map[string]bool
	stall   map[string]time.Duration
	fetched map[string]int
	stalled map[string]int // responses held by a stall, by name
}

func (p *bkProxy) setStall(file string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stall[file] = d
}

// stalls is how many answers for name a stall has held (or holds).
func (p *bkProxy) stalls(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled[name]
}

func startBkProxy(t testing.TB, upstream string) *bkProxy {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := &bkProxy{tamper: map[string]bool{}, stall: map[string]time.Duration{}, fetched: map[string]int{}, stalled: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	rp.ModifyResponse = func(resp *http.Response) error {
		name := path.Base(resp.Request.URL.Path)
		p.mu.Lock()
		tamper, stall := p.tamper[name], p.stall[name]
		if strings.HasPrefix(resp.Request.URL.Path, "/files/") {
			p.fetched[name]++
		}
		if stall > 0 {
			p.stalled[name]++
		}
		p.mu.Unlock()
		if stall > 0 {
			time.Sleep(stall)
		}
		if !tamper || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Request.URL.Path, "/files/") {
			return nil
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if len(b) > 0 {
			b[len(b)-1] ^= 0xff
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	p.URL = srv.URL + "/simple/"
	return p
}

// bkWrite writes wheels (and sdists, named "sdist:NAME") into dir.
func bkWrite(t testing.TB, dir string, ws ...fixture.Wheel) {
	t.Helper()
	for _, w := range ws {
		var err error
		if n, ok := strings.CutPrefix(w.Name, "sdist:"); ok {
			_, err = fixture.Sdist(dir, n, w.Version)
		} else {
			_, err = w.Write(dir)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// bkDeploy is one broker deployment.
type bkDeploy struct {
	h         *host
	reg       *registrytest.Registry // nil for an oci: layout repository
	repo      string
	regArgs   []string // --ca-file for the real registry
	priv, pub string
	idxDir    string
	proxy     *bkProxy
	catalog   string
	db        string
	baseLock  string
	baseRef   string // digest of the first base
	serve     *bkServe
	admin     string
	owner     string // token of alice
	owner2    string // token of bob
}

// newBkDeploy publishes the base (pin 1.0) tagged current, writes the rest of the index and
// the catalog, mints tokens and starts pylayer serve. real: a registry with TLS and auth.
func newBkDeploy(ctx context.Context, t *testing.T, real bool) *bkDeploy {
	t.Helper()
	d := &bkDeploy{idxDir: sharedDir(t)}
	if real {
		d.reg = registrytest.Start(t, registrytest.Options{})
		d.h = newHost(t, "DOCKER_CONFIG="+d.reg.DockerConfig)
		d.repo = d.reg.Ref("team/pylayer")
		d.regArgs = []string{"--ca-file", d.reg.CAFile}
	} else {
		d.h = newHost(t)
		d.repo = "oci:" + filepath.Join(d.h.home, "layout")
	}
	d.priv, d.pub = d.h.keygen(ctx, t, "cosign")
	bkWrite(t, d.idxDir, fixture.Wheel{Name: "pin", Version: "1.0"})
	d.proxy = startBkProxy(t, serveIndex(t, d.idxDir))
	d.baseLock = filepath.Join(d.h.home, "base1.lock.json")
	d.h.must(ctx, t, lockArgs(d.proxy.URL, d.baseLock, []string{"pin"})...)
	d.baseRef = d.publishBase(ctx, t, d.baseLock)
	bkWrite(t, d.idxDir,
		fixture.Wheel{Name: "pin", Version: "2.0"},
		fixture.Wheel{Name: "foo", Version: "1.0"}, fixture.Wheel{Name: "foo", Version: "2.0"},
		fixture.Wheel{Name: "needpin2", Version: "1.0", RequiresDist: []string{"pin>=2"}},
		fixture.Wheel{Name: "needpin1", Version: "1.0", RequiresDist: []string{"pin<2"}},
		fixture.Wheel{Name: "offlist", Version: "1.0"}, fixture.Wheel{Name: "offlist2", Version: "1.0"},
		fixture.Wheel{Name: "evil", Version: "1.0"}, fixture.Wheel{Name: "tampered", Version: "1.0"},
		fixture.Wheel{Name: "sdist:sdistonly", Version: "1.0"})
	d.proxy.mu.Lock()
	d.proxy.tamper[fixture.Wheel{Name: "tampered", Version: "1.0"}.Filename()] = true
	d.proxy.mu.Unlock()
	d.catalog = filepath.Join(d.h.home, "catalog.json")
	if err := os.WriteFile(d.catalog, []byte(bkCatalog), 0o644); err != nil {
		t.Fatal(err)
	}
	d.db = filepath.Join(d.h.home, "broker", "broker.db")
	if err := os.MkdirAll(filepath.Dir(d.db), 0o700); err != nil {
		t.Fatal(err)
	}
	d.admin = d.token(ctx, t, "admin", "root")
	d.owner = d.token(ctx, t, "owner", "alice")
	d.owner2 = d.token(ctx, t, "owner", "bob")
	d.serve = d.start(t)
	return d
}

// publishBase publishes a base lock tagged current and returns its digest.
func (d *bkDeploy) publishBase(ctx context.Context, t testing.TB, lockPath string) string {
	t.Helper()
	args := append([]string{"publish", lockPath, "--repo", d.repo, "--key", d.priv, "--index-url", d.proxy.URL, "--tag", "current", "--json"}, d.regArgs...)
	var p published
	if err := json.Unmarshal([]byte(d.h.must(ctx, t, args...)), &p); err != nil {
		t.Fatalf("pylayer publish --json: %v", err)
	}
	return p.Digest
}

func (d *bkDeploy) token(ctx context.Context, t testing.TB, role, subject string) string {
	t.Helper()
	tok := d.h.must(ctx, t, "token", "create", "--db", d.db, "--role", role, "--subject", subject)
	if len(tok) < 20 || strings.ContainsAny(tok, " \n") {
		t.Fatalf("pylayer token create printed %q", tok)
	}
	return tok
}

// bkServe is a running pylayer serve.
type bkServe struct {
	URL    string
	stderr *syncBuf
	*child
}

func (d *bkDeploy) start(t testing.TB) *bkServe {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--db", d.db, "--catalog", d.catalog,
		"--repo", d.repo, "--key", d.priv, "--index-url", d.proxy.URL}, d.regArgs...)
	cmd := d.h.command(context.Background(), t, args...)
	s := &bkServe{stderr: &syncBuf{}}
	cmd.Stderr = s.stderr
	s.child, s.URL = startServer(t, cmd, 10*time.Second)
	return s
}

// kill9 kills serve with SIGKILL and waits until it is gone.
func (s *bkServe) kill9() {
	s.cmd.Process.Kill()
	<-s.done
}

// call sends a request to the broker as it comes, for the suites that test the wire
// (malformed bodies, routes a token may not use); body is nil, []byte (sent as JSON) or a
// value to encode. It returns the status and the body. Everything else goes through the
// typed client (api).
func (s *bkServe) call(t testing.TB, method, p, token string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	ctype := ""
	if rd != nil {
		ctype = "application/json"
	}
	return s.raw(t, method, p, token, ctype, rd)
}

func (s *bkServe) raw(t testing.TB, method, p, token, ctype string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+p, body)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, p, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, p, err)
	}
	return resp.StatusCode, b
}

// api is the broker's typed client, calling with token.
func (s *bkServe) api(t testing.TB, token string) *client.Client {
	t.Helper()
	c, err := client.New(s.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ok takes a client call's results: ok(c.Env(ctx, id))(t) fails the test unless err is
// nil, and returns v.
func ok[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err) // a client.Error names the route, the status and the API's error and hint
		}
		return v
	}
}

// bkSession is a session with its agent token.
type bkSession struct {
	ID, Agent string
}

func (s *bkServe) newSession(t testing.TB, owner string) bkSession {
	t.Helper()
	cs := ok(s.api(t, owner).CreateSession(t.Context(), client.NewSession{}))(t)
	if cs.Session.ID == "" || cs.AgentToken == "" {
		t.Fatalf("POST /v1/sessions: no session id or agent token: %+v", cs)
	}
	return bkSession{ID: cs.Session.ID, Agent: cs.AgentToken}
}

// bkRequest is a broker request as the API answers it.
type bkRequest struct{ broker.Request }

func (r bkRequest) reasons() string { return strings.Join(r.Reasons, " | ") + " " + r.Error }

func (s *bkServe) ask(t testing.TB, se bkSession, specs ...string) bkRequest {
	t.Helper()
	return bkRequest{ok(s.api(t, se.Agent).Ask(t.Context(), se.ID, specs...))(t)}
}

// request reads a request as it is now; with wait, long-polls it once.
func (s *bkServe) request(t testing.TB, token, id string, wait time.Duration) bkRequest {
	t.Helper()
	return bkRequest{ok(s.api(t, token).Poll(t.Context(), id, wait))(t)}
}

// wait long-polls a request until it is terminal (bounded: 3 minutes).
func (s *bkServe) wait(t testing.TB, token, id string) bkRequest {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	return bkRequest{ok(s.api(t, token).Wait(ctx, id))(t)}
}

func (s *bkServe) env(t testing.TB, token, id string) broker.Env {
	t.Helper()
	return ok(s.api(t, token).Env(t.Context(), id))(t)
}

// list lists the requests token may see, of the filter's session and state.
func (s *bkServe) list(t testing.TB, token string, f client.Filter) []bkRequest {
	t.Helper()
	var out []bkRequest
	for _, r := range ok(s.api(t, token).Requests(t.Context(), f))(t) {
		out = append(out, bkRequest{r})
	}
	return out
}

// requests lists the requests of a session as an admin sees them.
func (d *bkDeploy) requests(t testing.TB, session string) []bkRequest {
	t.Helper()
	return d.serve.list(t, d.admin, client.Filter{Session: session})
}

func (s *bkServe) audit(t testing.TB, token, session string) []broker.AuditEvent {
	t.Helper()
	return ok(s.api(t, token).Audit(t.Context(), session))(t)
}

// runSession runs python code in the session's sandbox with pylayer run --session.
func (d *bkDeploy) runSession(ctx context.Context, t testing.TB, id, code string) string {
	t.Helper()
	args := append([]string{"run", "--session", id, "--db", d.db, "--repo", d.repo, "--trust", d.pub, "--timeout", "2m"}, d.regArgs...)
	return d.h.must(ctx, t, append(args, "--", "python3", "-c", code)...)
}

// runSessionVia runs code in a session found through the broker's API, as a host other
// than the broker's would: no database, the agent token in the environment, never in argv.
func (d *bkDeploy) runSessionVia(ctx context.Context, t testing.TB, se bkSession, code string) string {
	t.Helper()
	args := append([]string{"run", "--session", se.ID, "--broker", d.serve.URL, "--repo", d.repo, "--trust", d.pub, "--timeout", "2m"}, d.regArgs...)
	cmd := d.h.command(ctx, t, append(args, "--", "python3", "-c", code)...)
	cmd.Env = append(cmd.Env, "PYLAYER_TOKEN="+se.Agent)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pylayer run --broker: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// verify checks a digest of the repository with pylayer verify.
func (d *bkDeploy) verify(ctx context.Context, t testing.TB, digest string) {
	t.Helper()
	d.h.must(ctx, t, append([]string{"verify", d.repo + "@" + digest, "--trust", d.pub}, d.regArgs...)...)
}

// randomBytes returns n random bytes (incompressible wheel content).
func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// multipartWheel builds a multipart body with one file part in field "wheel".
func multipartWheel(filename string, data []byte) (ctype string, body []byte) {
	const boundary = "pylayer-e2e-boundary"
	var b bytes.Buffer
	fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=\"wheel\"; filename=\"%s\"\r\nContent-Type: application/octet-stream\r\n\r\n", boundary, filename)
	b.Write(data)
	fmt.Fprintf(&b, "\r\n--%s--\r\n", boundary)
	return "multipart/form-data; boundary=" + boundary, b.Bytes()
}
