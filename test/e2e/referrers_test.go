package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	registrytest "github.com/pylayer/pylayer/test/registry"
)

// artifactTypeSignature is the artifactType of a cosign signature stored as a referrer.
const artifactTypeSignature = "application/vnd.dev.cosign.artifact.sig.v1+json"

// TestSignatureReferrersRegistry: against a real registry without the OCI 1.1 referrers
// API (Debian's distribution 2.8), pylayer publish stores its signature as a referrer
// too, listed in the sha256-<hex> fallback index; a copy of the artifact that carries
// only that index (no classic sha256-<hex>.sig tag) is verified by the stock `cosign
// verify --experimental-oci11` and pulled by pylayer, and a signature `cosign sign
// --registry-referrers-mode=oci-1-1` writes (no tag at all) is accepted by pylayer pull.
func TestSignatureReferrersRegistry(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, lk, ci, priv, pub := ciRegistry(ctx, t)
	tls := []string{"--ca-file", r.CAFile}
	signed := r.Ref("team/signed")
	p := ci.publish(ctx, t, lk["wheel"], signed, priv, tls...)
	fallback := strings.Replace(p.Digest, ":", "-", 1)
	sigTag := fallback + ".sig"

	// The fallback index lists one signature referrer, whose subject is the artifact.
	var idx v1.Index
	if err := json.Unmarshal([]byte(mustTool(ctx, t, r, "crane", "manifest", signed+":"+fallback)), &idx); err != nil {
		t.Fatal(err)
	}
	if idx.MediaType != v1.MediaTypeImageIndex || len(idx.Manifests) != 1 || idx.Manifests[0].ArtifactType != artifactTypeSignature {
		t.Fatalf("fallback index %s = %+v, want one signature referrer", fallback, idx)
	}
	ref := registryManifest(ctx, t, r, "team/signed", idx.Manifests[0].Digest.String())
	if ref.Subject == nil || ref.Subject.Digest.String() != p.Digest || ref.ArtifactType != artifactTypeSignature || len(ref.Layers) != 1 {
		t.Fatalf("referrer %s = %+v, want one signature of %s", idx.Manifests[0].Digest, ref, p.Digest)
	}

	t.Run("only the referrer: cosign --experimental-oci11 and pylayer accept it", func(t *testing.T) {
		repo := r.Ref("team/referrer-only")
		mustTool(ctx, t, r, "crane", "copy", p.Ref, repo+":x")
		mustTool(ctx, t, r, "crane", "copy", signed+":"+fallback, repo+":"+fallback) // the index and the referrer, no .sig tag
		if out, err := tool(ctx, t, r, "crane", "digest", repo+":"+sigTag); err == nil {
			t.Fatalf("the copy has the classic tag %s: %s", sigTag, out)
		}
		copied := repo + "@" + p.Digest
		if out, err := tool(ctx, t, r, "cosign", "verify", "--key", pub, "--insecure-ignore-tlog=true", copied); err == nil {
			t.Fatalf("cosign verify in tag mode passed without the tag:\n%s", out)
		}
		out := mustTool(ctx, t, r, "cosign", "verify", "--key", pub, "--insecure-ignore-tlog=true", "--experimental-oci11", copied)
		if !strings.Contains(out, p.Digest) {
			t.Fatalf("cosign verify --experimental-oci11 printed no payload naming %s:\n%s", p.Digest, out)
		}
		h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
		if got := h.pull(ctx, t, copied, append([]string{"--trust", pub}, tls...)...); got.Digest != p.Digest || !got.Verified {
			t.Fatalf("pull = %+v, want %s verified", got, p.Digest)
		}
		_, otherPub := ci.keygen(ctx, t, "other")
		res := newHost(t, "DOCKER_CONFIG="+r.DockerConfig).run(ctx, t, append([]string{"pull", copied, "--trust", otherPub}, tls...)...)
		if res.code == 0 || !strings.Contains(res.stderr, "signed, but by no trusted key") {
			t.Fatalf("pull trusting another key: exit %d\n%s", res.code, res.stderr)
		}
	})

	t.Run("cosign signs a referrer, pylayer pulls", func(t *testing.T) {
		repo := r.Ref("team/cosigned")
		mustTool(ctx, t, r, "crane", "copy", p.Ref, repo+":x")
		copied := repo + "@" + p.Digest
		cosignExperimental(ctx, t, r, "sign", "--key", priv, "--tlog-upload=false", "--yes", "--registry-referrers-mode=oci-1-1", copied)
		if out, err := tool(ctx, t, r, "crane", "digest", repo+":"+sigTag); err == nil {
			t.Fatalf("cosign wrote the classic tag %s too: %s", sigTag, out)
		}
		h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
		if got := h.pull(ctx, t, copied, append([]string{"--trust", pub}, tls...)...); got.Digest != p.Digest || !got.Verified {
			t.Fatalf("pull of cosign's referrer signature = %+v, want %s verified", got, p.Digest)
		}
	})
}

// cosignExperimental runs the stock cosign as tool does, with COSIGN_EXPERIMENTAL=1
// (which --registry-referrers-mode=oci-1-1 needs), and fails the test unless it exits 0.
func cosignExperimental(ctx context.Context, t *testing.T, r *registrytest.Registry, args ...string) string {
	t.Helper()
	home := sharedDir(t)
	cmd := exec.CommandContext(ctx, registrytest.Tool(t, "cosign"), args...)
	cmd.Env = append([]string{
		"HOME=" + home,
		"PATH=/usr/bin:/bin",
		"COSIGN_PASSWORD=" + keyPassword,
		"COSIGN_EXPERIMENTAL=1",
		"TUF_ROOT=" + filepath.Join(home, "tuf"),
		"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "NO_PROXY=127.0.0.1,localhost",
	}, r.Env()...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("cosign %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}
