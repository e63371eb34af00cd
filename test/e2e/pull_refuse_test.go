package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	registrytest "github.com/pylayer/pylayer/test/registry"
)

// TestPullRefuses: pulls that must be refused with a clear message, unpacking nothing:
// unsigned, signed by an untrusted key, a signature copied from another digest, a blob
// changed in the registry's storage, wrong credentials, a registry that is down, a
// registry that answers 503 for good, an unsafe layer tar. And what must still work: 503s
// that pass, and an unsigned artifact in the one repository a policy exempts, loudly.
func TestPullRefuses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, lk, ci, priv, pub := ciRegistry(ctx, t)
	_, otherPub := ci.keygen(ctx, t, "other")
	tls := []string{"--ca-file", r.CAFile}
	signed := r.Ref("team/signed")
	x := ci.publish(ctx, t, lk["office"], signed, priv, tls...)
	y := ci.publish(ctx, t, lk["office-pip"], signed, priv, tls...)
	w := ci.publish(ctx, t, lk["wheel"], r.Ref("team/tampered"), priv, tls...)
	// Unsigned copies, made with the stock crane (it copies no signature).
	mustTool(ctx, t, r, "crane", "copy", x.Ref, r.Ref("team/unsigned")+":x")
	mustTool(ctx, t, r, "crane", "copy", x.Ref, r.Ref("team/unsigned-ok")+":x")
	// Y without its signature, but with X's signature on Y's signature tag.
	mustTool(ctx, t, r, "crane", "copy", y.Ref, r.Ref("team/copied")+":y")
	sigTag := func(d string) string { return strings.Replace(d, ":", "-", 1) + ".sig" }
	mustTool(ctx, t, r, "crane", "copy", signed+":"+sigTag(x.Digest), r.Ref("team/copied")+":"+sigTag(y.Digest))
	// Flip one byte of the tampered repository's only wheel blob in the registry's storage.
	tm := registryManifest(ctx, t, r, "team/tampered", w.Digest)
	blobPath := r.BlobPath("team/tampered", tm.Layers[0].Digest)
	b, err := os.ReadFile(blobPath)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(blobPath, b, 0o644); err != nil {
		t.Fatal(err)
	}

	policy := filepath.Join(sharedDir(t), "policy.json")
	writeJSON(t, policy, map[string]any{"repositories": []map[string]any{
		{"match": r.Ref("team/unsigned-ok"), "insecure_accept_unsigned": true},
		{"match": r.Host + "/team/*", "keys": []string{pub}},
	}})

	wrongCfg := sharedDir(t)
	const wrongPassword = "not-the-password-0d9f8e7c"
	writeJSON(t, filepath.Join(wrongCfg, "config.json"), map[string]any{"auths": map[string]any{
		r.Host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(r.User + ":" + wrongPassword))},
	}})

	var mu sync.Mutex
	seen := map[string]int{}
	transient := registrytest.StartFaultProxy(t, r, func(n int, req *http.Request) (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		k := req.Method + " " + req.URL.Path
		seen[k]++
		if seen[k] == 1 {
			return http.StatusServiceUnavailable, false
		}
		return 0, true
	})
	permanent := registrytest.StartFaultProxy(t, r, func(int, *http.Request) (int, bool) { return http.StatusServiceUnavailable, false })
	closed := closedPort(t)

	cases := []struct {
		name   string
		ref    string
		trust  string
		env    []string
		want   []string // in stderr
		secret string   // must appear nowhere
	}{
		{name: "unsigned", ref: r.Ref("team/unsigned") + "@" + x.Digest, trust: pub,
			want: []string{"artifact is not signed", "pylayer publish --key"}},
		{name: "untrusted key", ref: x.Ref, trust: otherPub,
			want: []string{"signed, but by no trusted key"}},
		{name: "copied signature", ref: r.Ref("team/copied") + "@" + y.Digest, trust: pub,
			want: []string{"signature is for another artifact"}},
		{name: "tampered blob", ref: w.Ref, trust: pub,
			want: []string{"digest mismatch", tm.Layers[0].Digest.String()}},
		{name: "wrong credentials", ref: x.Ref, trust: pub, env: []string{"DOCKER_CONFIG=" + wrongCfg},
			want: []string{"authentication failed", "rejected the credentials", wrongCfg}, secret: wrongPassword},
		{name: "registry down", ref: closed + "/team/signed@" + x.Digest, trust: pub,
			want: []string{closed, "not answering", "attempts"}},
		{name: "permanent 503", ref: permanent + "/team/signed@" + x.Digest, trust: pub,
			want: []string{"503"}},
		{name: "unsigned under a policy for signed", ref: r.Ref("team/unsigned") + "@" + x.Digest, trust: policy,
			want: []string{"artifact is not signed"}},
		{name: "repository the policy does not name", ref: r.Ref("elsewhere/repo") + "@" + x.Digest, trust: policy,
			want: []string{"no trust policy", "no rule for"}},
	}
	// The group returns only when its parallel subtests are done, before cancel runs.
	t.Run("pulls", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				h := newHost(t, append([]string{"DOCKER_CONFIG=" + r.DockerConfig}, c.env...)...)
				start := time.Now()
				res := h.run(ctx, t, append([]string{"pull", c.ref, "--trust", c.trust}, tls...)...)
				if res.code == 0 {
					t.Fatalf("pull succeeded, want a refusal:\n%s\n%s", res.stdout, res.stderr)
				}
				if strings.TrimSpace(res.stdout) != "" {
					t.Errorf("a refused pull printed %q on stdout", res.stdout)
				}
				for _, s := range c.want {
					if !strings.Contains(res.stderr, s) {
						t.Errorf("stderr does not mention %q:\n%s", s, res.stderr)
					}
				}
				for _, s := range []string{c.secret, r.Password, base64.StdEncoding.EncodeToString([]byte(r.User + ":" + c.secret))} {
					if s != "" && strings.Contains(res.stdout+res.stderr, s) {
						t.Errorf("the output reveals a secret (%d chars)", len(s))
					}
				}
				assertNothingUnpacked(t, h.cache)
				t.Logf("refused after %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(res.stderr))
			})
		}

		t.Run("transient 503s", func(t *testing.T) {
			t.Parallel()
			h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
			got := h.pull(ctx, t, transient+"/team/signed@"+x.Digest, append([]string{"--trust", pub}, tls...)...)
			if !got.Verified {
				t.Errorf("pull through the flaky proxy = %+v, want verified", got)
			}
			importCheck(ctx, t, got.Root)
			mu.Lock()
			defer mu.Unlock()
			if len(seen) < 7 { // ping, manifest, signature tag + blob, config, 5 layer blobs...
				t.Errorf("only %d distinct requests went through the proxy: %v", len(seen), seen)
			}
		})
		t.Run("unsigned accepted by policy, loudly", func(t *testing.T) {
			t.Parallel()
			h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
			res := h.run(ctx, t, append([]string{"pull", r.Ref("team/unsigned-ok") + ":x", "--trust", policy, "--json"}, tls...)...)
			if res.code != 0 {
				t.Fatalf("pull: exit %d\n%s", res.code, res.stderr)
			}
			var p pulled
			if err := json.Unmarshal([]byte(res.stdout), &p); err != nil {
				t.Fatal(err)
			}
			if p.Verified || p.Digest != x.Digest {
				t.Errorf("pull = %+v, want digest %s, not verified", p, x.Digest)
			}
			if !strings.Contains(res.stderr, "WARNING: NOT verifying the signature of "+r.Ref("team/unsigned-ok")+"@"+x.Digest) {
				t.Errorf("no loud warning on stderr:\n%s", res.stderr)
			}
			importCheck(ctx, t, p.Root)
		})
		t.Run("signed under the policy", func(t *testing.T) {
			t.Parallel()
			h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
			res := h.run(ctx, t, append([]string{"pull", x.Ref, "--trust", policy}, tls...)...)
			if res.code != 0 || strings.Contains(res.stderr, "WARNING") {
				t.Fatalf("pull of a signed artifact under the policy: exit %d\n%s", res.code, res.stderr)
			}
		})
	})
	t.Run("unsafe layer tar", func(t *testing.T) { unsafeLayer(ctx, t, r, lk["wheel"], priv, pub) })
	t.Run("zstd layer", func(t *testing.T) { zstdLayer(ctx, t, r, lk["wheel"], priv, pub) })
}

// closedPort is 127.0.0.1:PORT where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(fmt.Errorf("writing %s: %w", path, err))
	}
}
