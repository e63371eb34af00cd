package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// platformIndexed is the --json output of pylayer publish with several locks.
type platformIndexed struct {
	Ref     string `json:"ref"`
	Digest  string `json:"digest"`
	Pushed  bool   `json:"pushed"`
	Entries []struct {
		Platform string `json:"platform"`
		Digest   string `json:"digest"`
	} `json:"entries"`
}

// TestPlatformIndexRegistry: the same pure-Python requirement locked for x86_64 and
// aarch64 is published under one tag of a real registry as an image index; the stock crane
// sees two platform entries and cosign verify accepts the tag; pylayer pull of the tag on
// this x86_64 host gets the x86_64 entry and its files, --platform linux/arm64 the other;
// a tag whose index lacks the host's platform is refused naming the platforms it has.
func TestPlatformIndexRegistry(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, _, ci, priv, pub := ciRegistry(ctx, t)
	_, url := index(t)
	dir := sharedDir(t)
	lockFor := func(platform string) string {
		out := filepath.Join(dir, platform+".lock.json")
		ci.must(ctx, t, lockArgs(url, out, []string{"xlsxwriter"}, "--platform", platform)...)
		return out
	}
	amd, arm, musl := lockFor("manylinux_2_28_x86_64"), lockFor("manylinux_2_28_aarch64"), lockFor("musllinux_1_2_x86_64")
	repo := r.Ref("team/pylayer")
	publish := func(tag string, locks ...string) platformIndexed {
		args := append([]string{"publish"}, locks...)
		args = append(args, "--repo", repo, "--key", priv, "--index-url", url, "--ca-file", r.CAFile, "--tag", tag, "--json")
		var p platformIndexed
		if err := json.Unmarshal([]byte(ci.must(ctx, t, args...)), &p); err != nil {
			t.Fatalf("pylayer publish --json: %v", err)
		}
		if !strings.HasPrefix(p.Digest, "sha256:") || p.Ref != repo+"@"+p.Digest || len(p.Entries) != len(locks) {
			t.Fatalf("pylayer publish of %d locks printed %+v", len(locks), p)
		}
		return p
	}
	p := publish("current", amd, arm)
	entry := map[string]string{}
	for _, e := range p.Entries {
		entry[e.Platform] = e.Digest
	}
	if entry["linux/amd64"] == "" || entry["linux/arm64"] == "" || entry["linux/amd64"] == entry["linux/arm64"] {
		t.Fatalf("entries %+v: want one for linux/amd64 and one for linux/arm64", p.Entries)
	}

	t.Run("crane manifest", func(t *testing.T) {
		out := mustTool(ctx, t, r, "crane", "manifest", repo+":current")
		var idx v1.Index
		if err := json.Unmarshal([]byte(out), &idx); err != nil {
			t.Fatalf("crane manifest printed %q: %v", out, err)
		}
		if idx.MediaType != v1.MediaTypeImageIndex || len(idx.Manifests) != 2 {
			t.Fatalf("crane manifest: media type %q with %d entries, want an image index of 2:\n%s", idx.MediaType, len(idx.Manifests), out)
		}
		for _, m := range idx.Manifests {
			if m.Platform == nil || m.Platform.OS != "linux" || entry["linux/"+m.Platform.Architecture] != m.Digest.String() ||
				m.Annotations["dev.pylayer.libc"] != "glibc" || m.Annotations["dev.pylayer.python"] != "3.11" || len(m.Annotations["dev.pylayer.key"]) != 64 {
				t.Errorf("index entry %+v (platform %+v): want linux/amd64 and linux/arm64 with pylayer annotations", m, m.Platform)
			}
		}
		if d := strings.TrimSpace(mustTool(ctx, t, r, "crane", "digest", repo+":current")); d != p.Digest {
			t.Errorf("crane digest of the tag is %s, want the index %s", d, p.Digest)
		}
	})
	t.Run("cosign verify", func(t *testing.T) {
		out := mustTool(ctx, t, r, "cosign", "verify", "--key", pub, "--insecure-ignore-tlog=true", repo+":current")
		if !strings.Contains(out, p.Digest) {
			t.Fatalf("cosign verify of the index tag printed no payload naming %s:\n%s", p.Digest, out)
		}
	})
	t.Run("pull", func(t *testing.T) {
		h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
		got := h.pull(ctx, t, repo+":current", "--trust", pub, "--ca-file", r.CAFile)
		if got.Digest != entry["linux/amd64"] || !got.Verified {
			t.Fatalf("pull of the index tag = %+v, want the x86_64 entry %s, verified", got, entry["linux/amd64"])
		}
		if _, err := os.Stat(filepath.Join(got.Root, "site-packages", "xlsxwriter", "__init__.py")); err != nil {
			t.Errorf("the pulled x86_64 entry lacks xlsxwriter: %v", err)
		}
		other := h.pull(ctx, t, repo+":current", "--trust", pub, "--ca-file", r.CAFile, "--platform", "linux/arm64")
		if other.Digest != entry["linux/arm64"] || other.Root == got.Root {
			t.Fatalf("pull --platform linux/arm64 = %+v, want the aarch64 entry %s", other, entry["linux/arm64"])
		}
		// By the index's digest: the host's entry again.
		if byDigest := h.pull(ctx, t, p.Ref, "--trust", pub, "--ca-file", r.CAFile); byDigest.Digest != entry["linux/amd64"] {
			t.Errorf("pull %s = %s, want the x86_64 entry %s", p.Ref, byDigest.Digest, entry["linux/amd64"])
		}
	})
	t.Run("no entry for the host", func(t *testing.T) {
		publish("elsewhere", arm, musl)
		h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
		stderr := h.refuse(ctx, t, "pull", repo+":elsewhere", "--trust", pub, "--ca-file", r.CAFile)
		for _, want := range []string{"no entry for the platform linux/amd64", "linux/amd64+musl (musllinux_1_2_x86_64)", "linux/arm64 (manylinux_2_28_aarch64)", "--platform"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("pull of an index without linux/amd64: stderr %q does not say %q", stderr, want)
			}
		}
		assertNothingUnpacked(t, h.cache)
	})
}
