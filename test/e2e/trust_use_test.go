package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/sign"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	"github.com/pylayer/pylayer/registry"
	registrytest "github.com/pylayer/pylayer/test/registry"
)

// TestTrustOnUse: the trust policy is checked on every use of what the host cache holds,
// not only when it is fetched, and with no network: an unsigned exception stays in its
// repository, a key removed from the policy stops working at once, a signed manifest that
// contradicts its own lock is neither pulled nor run, and policies match repositories in
// their normalized form (host case, the default port 443, path case).
func TestTrustOnUse(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, lk, ci, privA, pubA := ciRegistry(ctx, t)
	_, pubB := ci.keygen(ctx, t, "b")
	// One after another: the refusals check that the registry saw no request at all.
	t.Run("unsigned exception stays in its layout", func(t *testing.T) {
		trustUnsignedStays(ctx, t, r, ci, lk["wheel"], privA, pubA)
	})
	t.Run("removed key stops working at once", func(t *testing.T) {
		trustKeyRemoved(ctx, t, r, ci, lk["wheel"], privA, pubA, pubB)
	})
	t.Run("manifest contradicting its lock", func(t *testing.T) {
		trustInconsistent(ctx, t, r, ci, lk["office"], lk["wheel"], privA, pubA)
	})
	t.Run("normalized matching", func(t *testing.T) {
		trustNormalized(ctx, t, r, ci, lk["wheel"], privA, pubA)
	})
}

// ran is the command the positive runs execute: it prints "ran" in the sandbox.
var ran = []string{"--", "python3", "-c", "print('ran')"}

// mustRun runs pylayer run with args (flags and layers), which must print "ran".
func mustRun(ctx context.Context, t *testing.T, h *host, args ...string) result {
	t.Helper()
	res := h.run(ctx, t, append(append([]string{"run", "--timeout", "1m"}, args...), ran...)...)
	if res.code != 0 || strings.TrimSpace(res.stdout) != "ran" {
		t.Fatalf("pylayer run %s: exit %d, stdout %q\n%s", strings.Join(args, " "), res.code, res.stdout, res.stderr)
	}
	return res
}

// refuseRun runs pylayer run with args, which must be refused before the sandbox starts,
// saying each of want; the registry must see no request (the decision is offline).
func refuseRun(ctx context.Context, t *testing.T, h *host, r *registrytest.Registry, args []string, want ...string) string {
	t.Helper()
	r.ResetLog()
	start := time.Now()
	stderr := h.refuse(ctx, t, append(append([]string{"run", "--timeout", "1m"}, args...), ran...)...)
	for _, s := range want {
		if !strings.Contains(stderr, s) {
			t.Errorf("the refusal does not say %q:\n%s", s, stderr)
		}
	}
	if reqs := r.Requests(); len(reqs) > 0 {
		t.Errorf("the refusal sent %d requests to the registry, want none (it is decided from the cache): %+v", len(reqs), reqs)
	}
	t.Logf("refused after %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr))
	return stderr
}

// ensureBase runs pylayer ensure --base ref and returns its report of the base.
func ensureBase(ctx context.Context, t *testing.T, h *host, ref string, args ...string) ensureItemJSON {
	t.Helper()
	out := h.must(ctx, t, append([]string{"--json", "ensure", "--base", ref, "--timeout", "1m"}, args...)...)
	var rep struct{ Base ensureItemJSON }
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("pylayer ensure --json printed %q: %v", out, err)
	}
	return rep.Base
}

type ensureItemJSON struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

// trustUnsignedStays: a layer admitted through a layout whose rule accepts unsigned
// artifacts is used from that layout (loudly, every time), but never by its digest under a
// repository whose rule requires a key.
func trustUnsignedStays(ctx context.Context, t *testing.T, r *registrytest.Registry, ci *host, lockPath, priv, pub string) {
	layout := "oci:" + filepath.Join(t.TempDir(), "scratch")
	x := ci.publish(ctx, t, lockPath, layout, priv) // its signature is never looked at
	signedRepo := r.Ref("team/signed-only")
	policy := filepath.Join(t.TempDir(), "policy.json")
	writeJSON(t, policy, map[string]any{"repositories": []map[string]any{
		{"match": layout, "insecure_accept_unsigned": true},
		{"match": r.Host + "/team/*", "keys": []string{pub}},
	}})
	h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
	reg := []string{"--trust", policy, "--ca-file", r.CAFile}

	first := mustRun(ctx, t, h, append(reg, "--layer", x.Ref)...)
	if !strings.Contains(first.stderr, "WARNING: NOT verifying the signature of "+x.Ref) {
		t.Errorf("the first run from the exempt layout did not warn:\n%s", first.stderr)
	}
	again := mustRun(ctx, t, h, append(reg, "--layer", x.Ref)...)
	if !strings.Contains(again.stderr, "WARNING: using "+x.Ref+" UNVERIFIED") {
		t.Errorf("a cached run from the exempt layout did not warn:\n%s", again.stderr)
	}

	attack := signedRepo + "@" + x.Digest
	refuseRun(ctx, t, h, r, append(reg, "--layer", attack),
		attack, "unsigned through "+layout, "an unsigned exception stays in its repository",
		"pull it again from "+signedRepo+" with a key the policy trusts")
	if b := ensureBase(ctx, t, h, attack, reg...); b.OK || !strings.Contains(b.Error, "an unsigned exception stays in its repository") {
		t.Errorf("ensure --base %s = %+v, want refused", attack, b)
	}
	// A policy file that is only a key (a "*" rule) refuses it the same way.
	refuseRun(ctx, t, h, r, []string{"--trust", pub, "--ca-file", r.CAFile, "--layer", attack}, "an unsigned exception stays in its repository")
}

// trustKeyRemoved: a layer admitted with key A runs while A is trusted; once the policy
// no longer lists A it is refused at once, from the cache, saying which key went; with A
// back it runs again.
func trustKeyRemoved(ctx context.Context, t *testing.T, r *registrytest.Registry, ci *host, lockPath, privA, pubA, pubB string) {
	repo := r.Ref("team/rotate")
	y := ci.publish(ctx, t, lockPath, repo, privA, "--ca-file", r.CAFile)
	policy := func(keys ...string) string {
		p := filepath.Join(t.TempDir(), "policy.json")
		writeJSON(t, p, map[string]any{"repositories": []map[string]any{{"match": r.Host + "/team/*", "keys": keys}}})
		return p
	}
	withA, withB := policy(pubA), policy(pubB)
	h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
	reg := func(trust string) []string { return []string{"--trust", trust, "--ca-file", r.CAFile} }

	var v struct {
		SignedBy []string `json:"signed_by"`
	}
	if err := json.Unmarshal([]byte(h.must(ctx, t, append([]string{"verify", y.Ref, "--json"}, reg(withA)...)...)), &v); err != nil || len(v.SignedBy) != 1 {
		t.Fatalf("pylayer verify --json: %+v %v", v, err)
	}
	keyA, _, _ := strings.Cut(v.SignedBy[0], " ")
	if got := h.pull(ctx, t, y.Ref, reg(withA)...); !got.Verified {
		t.Fatalf("pull with key A trusted: %+v", got)
	}
	mustRun(ctx, t, h, append(reg(withA), "--layer", y.Ref)...)

	refuseRun(ctx, t, h, r, append(reg(withB), "--layer", y.Ref),
		y.Ref, "the key that admitted it ("+keyA+") was removed from the policy for "+repo,
		"pull it again from "+repo+" with a key the policy trusts")
	refuseRun(ctx, t, h, r, []string{"--trust", pubB, "--ca-file", r.CAFile, "--layer", y.Ref}, "was removed from the policy")
	if b := ensureBase(ctx, t, h, y.Ref, reg(withB)...); b.OK || !strings.Contains(b.Error, "was removed from the policy") {
		t.Errorf("ensure --base with key A removed = %+v, want refused", b)
	}
	// Pulling again asks the registry, whose only signature is A's: still refused.
	if e := h.refuse(ctx, t, append([]string{"pull", y.Ref}, reg(withB)...)...); !strings.Contains(e, "signed, but by no trusted key") {
		t.Errorf("pull with key A removed:\n%s", e)
	}
	mustRun(ctx, t, h, append(reg(withA), "--layer", y.Ref)...)
}

// trustInconsistent: a manifest signed by a trusted key whose layer blobs are not its own
// lock's wheels (the office lock, its last wheel swapped for another wheel) is refused by
// pull, run and verify alike, and nothing of it is unpacked.
func trustInconsistent(ctx context.Context, t *testing.T, r *registrytest.Registry, ci *host, officeLock, wheelLock, priv, pub string) {
	const path = "team/forged"
	office := ci.publish(ctx, t, officeLock, r.Ref(path), priv, "--ca-file", r.CAFile)
	other := ci.publish(ctx, t, wheelLock, r.Ref(path), priv, "--ca-file", r.CAFile)
	m := registryManifest(ctx, t, r, path, office.Digest)
	swapped := oci.LayerWheel(m.Layers[len(m.Layers)-1])
	m.Layers[len(m.Layers)-1] = registryManifest(ctx, t, r, path, other.Digest).Layers[0]
	evil := oci.LayerWheel(m.Layers[len(m.Layers)-1])
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := registry.ParseRef(r.Ref(path))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := registry.Open(ctx, ref, registry.Options{CAFile: r.CAFile, Keychain: staticKeychain{r.User, r.Password}})
	if err != nil {
		t.Fatal(err)
	}
	desc, err := repo.PushManifest(ctx, raw, v1.MediaTypeImageManifest, "forged")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := sign.LoadSigner(ctx, priv, func() ([]byte, error) { return []byte(keyPassword), nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sign.Sign(ctx, repo, desc, repo.Name(), signer); err != nil {
		t.Fatal(err)
	}
	forged := repo.Name() + "@" + desc.Digest.String()
	want := []string{forged, "the signed manifest does not match its own lock", evil, swapped, "do not use it"}

	h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
	reg := []string{"--trust", pub, "--ca-file", r.CAFile}
	ws := t.TempDir()
	for _, args := range [][]string{
		append([]string{"pull", forged}, reg...),
		append(append(append([]string{"run", "--workspace", ws, "--layer", forged}, reg...), "--"), "sh", "-c", "touch /workspace/ran"),
		append(append([]string{"run", "--layer", office.Ref, "--layer", forged}, reg...), ran...), // beside a good base
		append([]string{"verify", forged}, reg...),
	} {
		stderr := h.refuse(ctx, t, args...)
		for _, s := range want {
			if !strings.Contains(stderr, s) {
				t.Errorf("pylayer %s: the refusal does not say %q:\n%s", args[0], s, stderr)
			}
		}
		if args[0] == "run" && len(cacheEntries(t, h.cache, "layers")) > 1 {
			t.Errorf("pylayer %s: the cache holds %v", args[0], cacheEntries(t, h.cache, "layers"))
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused run ran its command: %v", err)
	}
	// Only the good base the third run pulled is in the cache, and only it was admitted.
	base := strings.TrimPrefix(office.Digest, "sha256:")
	if ls := cacheEntries(t, h.cache, "layers"); len(ls) != 1 || ls[0] != base {
		t.Errorf("layers in the cache: %v, want only the office base %s", ls, base)
	}
	// (The office base's use record, what its first use derived, is kept beside its admission.)
	if as := cacheEntries(t, h.cache, "admissions"); strings.Join(as, " ") != base+".json "+base+".use.json" {
		t.Errorf("admission records: %v, want only the office base's (and its use record)", as)
	}
	// A fresh host that only tries the forged one unpacks nothing at all.
	fresh := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
	fresh.refuse(ctx, t, append([]string{"pull", forged}, reg...)...)
	fresh.refuse(ctx, t, append(append([]string{"run", "--layer", forged}, reg...), ran...)...)
	assertNothingUnpacked(t, fresh.cache)
}

// trustNormalized: a rule written "127.0.0.1/TEAM/*" matches a pull from
// 127.0.0.1:443/team/norm, a rule for "LOCALHOST/team/norm" one from LocalHost:443, the
// cache records both under their normalized names, and runs by digest under any spelling
// of those repositories work offline (the registry unreachable); another port is another
// registry. A registry without a port is reached on 443, so this needs root to listen there.
func trustNormalized(ctx context.Context, t *testing.T, r *registrytest.Registry, ci *host, lockPath, priv, pub string) {
	z := ci.publish(ctx, t, lockPath, r.Ref("team/norm"), priv, "--ca-file", r.CAFile)
	fwd := forward(t, "127.0.0.1:443", r.Host)
	// Credentials for every spelling of the forwarded registry.
	dockerDir := t.TempDir()
	auths := map[string]any{}
	for _, h := range []string{r.Host, "127.0.0.1", "127.0.0.1:443", "localhost", "localhost:443", "LocalHost:443", "LocalHost"} {
		auths[h] = map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(r.User + ":" + r.Password))}
	}
	writeJSON(t, filepath.Join(dockerDir, "config.json"), map[string]any{"auths": auths})
	policy := filepath.Join(t.TempDir(), "policy.json")
	writeJSON(t, policy, map[string]any{"repositories": []map[string]any{
		{"match": "127.0.0.1/TEAM/*", "keys": []string{pub}},
		{"match": "LOCALHOST/team/norm", "keys": []string{pub}},
	}})
	h := newHost(t, "DOCKER_CONFIG="+dockerDir)
	reg := []string{"--trust", policy, "--ca-file", r.CAFile, "--insecure-registry", "localhost"}

	for _, ref := range []string{"127.0.0.1:443/team/norm@" + z.Digest, "LocalHost:443/team/norm@" + z.Digest} {
		res := h.run(ctx, t, append([]string{"pull", ref, "--json"}, reg...)...)
		var p pulled
		if res.code != 0 || json.Unmarshal([]byte(res.stdout), &p) != nil || !p.Verified || p.Digest != z.Digest {
			t.Fatalf("pull %s: exit %d, %q\n%s", ref, res.code, res.stdout, res.stderr)
		}
	}
	b, err := os.ReadFile(filepath.Join(h.cache, "admissions", "sha256", strings.TrimPrefix(z.Digest, "sha256:")+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Admissions []struct {
			Repository string `json:"repository"`
			Rule       string `json:"rule"`
		} `json:"admissions"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range rec.Admissions {
		got = append(got, a.Repository+" by "+a.Rule)
	}
	if want := []string{"127.0.0.1/team/norm by 127.0.0.1/TEAM/*", "localhost/team/norm by LOCALHOST/team/norm"}; strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("admissions recorded: %v, want %v", got, want)
	}

	fwd.close() // nothing answers on 443 any more: the runs below are offline
	for _, c := range []struct {
		ref  string
		want string // "" runs; else in the refusal
	}{
		{"127.0.0.1/team/norm@" + z.Digest, ""},
		{"127.0.0.1:443/team/norm@" + z.Digest, ""},
		{"localhost/team/norm@" + z.Digest, ""},
		{"LOCALHOST:443/team/norm@" + z.Digest, ""},
		{"127.0.0.1:4443/team/norm@" + z.Digest, "no rule for 127.0.0.1:4443/team/norm"},
		{"localhost/team/other@" + z.Digest, "no rule for localhost/team/other"},
	} {
		if c.want == "" {
			mustRun(ctx, t, h, append(reg, "--layer", c.ref)...)
			continue
		}
		refuseRun(ctx, t, h, r, append(reg, "--layer", c.ref), c.want)
	}
	if n := fwd.accepted(); n == 0 {
		t.Errorf("the forwarder on 443 saw no connection: the pulls did not go through it")
	}
}

// forwarder passes TCP connections from a local address to the registry.
type forwarder struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
	n     int
	wg    sync.WaitGroup
}

// forward listens on from (127.0.0.1:443 needs root or CAP_NET_BIND_SERVICE) and copies
// every connection to and from to, until close or the end of the test.
func forward(t *testing.T, from, to string) *forwarder {
	t.Helper()
	l, err := net.Listen("tcp", from)
	if err != nil {
		t.Fatalf("listening on %s, where a registry without a port is reached (this needs root, and the port free): %v", from, err)
	}
	f := &forwarder{l: l}
	t.Cleanup(f.close)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns, f.n = append(f.conns, c, up), f.n+1
			f.mu.Unlock()
			for _, p := range [][2]net.Conn{{c, up}, {up, c}} {
				f.wg.Add(1)
				go func() {
					defer f.wg.Done()
					io.Copy(p[0], p[1])
					p[0].Close()
					p[1].Close()
				}()
			}
		}
	}()
	return f
}

func (f *forwarder) accepted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// close stops listening, cuts every connection and waits for the copies to end.
func (f *forwarder) close() {
	f.l.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
