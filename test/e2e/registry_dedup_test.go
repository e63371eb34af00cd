package e2e

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	registrytest "github.com/pylayer/pylayer/test/registry"
)

// uploadedBlobs are the digests of the blob uploads the registry completed (the PUT, or a
// monolithic POST, that carries ?digest=) since its last ResetLog.
func uploadedBlobs(t testing.TB, r *registrytest.Registry) map[digest.Digest]bool {
	t.Helper()
	out := map[digest.Digest]bool{}
	for _, q := range r.Requests() {
		path, query, _ := strings.Cut(q.Path, "?")
		if (q.Method != http.MethodPut && q.Method != http.MethodPost) || !strings.Contains(path, "/blobs/uploads/") || q.Status >= 300 {
			continue
		}
		if vals, err := url.ParseQuery(query); err == nil && vals.Get("digest") != "" {
			out[digest.Digest(vals.Get("digest"))] = true
		}
	}
	return out
}

// TestPublishDedup: two base layers that share five of their wheels. Publishing the second
// uploads only its new wheel blob and its lock; pulling it into a cache that has the
// first fetches only the new wheel blob.
func TestPublishDedup(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, lk, ci, priv, pub := ciRegistry(ctx, t)
	repo := r.Ref("team/dedup")
	tls := []string{"--ca-file", r.CAFile}

	a := ci.publish(ctx, t, lk["office"], repo, priv, tls...)
	r.ResetLog()
	b := ci.publish(ctx, t, lk["office-pip"], repo, priv, tls...)
	uploaded := uploadedBlobs(t, r)

	ma := registryManifest(ctx, t, r, "team/dedup", a.Digest)
	mb := registryManifest(ctx, t, r, "team/dedup", b.Digest)
	shared := map[digest.Digest]bool{}
	for _, l := range ma.Layers {
		shared[l.Digest] = true
	}
	var fresh []v1.Descriptor
	for _, l := range mb.Layers {
		if !shared[l.Digest] {
			fresh = append(fresh, l)
		}
	}
	if len(fresh) != 1 || !strings.HasPrefix(fresh[0].Annotations[v1.AnnotationTitle], "pip-") {
		t.Fatalf("the second layer's new blobs are %+v, want pip's only", fresh)
	}
	pip := fresh[0]
	for d := range shared {
		if uploaded[d] {
			t.Errorf("the second publish uploaded shared blob %s again", d)
		}
	}
	if !uploaded[pip.Digest] || !uploaded[mb.Config.Digest] {
		t.Errorf("the second publish did not upload the pip blob and the lock; uploads: %v", uploaded)
	}
	if s := b.Stats; s.Uploaded != 2 || s.Skipped != 5 || s.BytesUploaded != pip.Size+mb.Config.Size {
		t.Errorf("second publish stats %+v, want 2 uploaded (pip %d B + lock %d B), 5 skipped", s, pip.Size, mb.Config.Size)
	}
	t.Logf("publish 1: %d blobs, %d B uploaded; publish 2: %d uploaded, %d skipped, %d B uploaded (pip blob %d B, lock %d B); registry saw %d blob uploads in publish 2 (signature blobs included)",
		a.Stats.Uploaded, a.Stats.BytesUploaded, b.Stats.Uploaded, b.Stats.Skipped, b.Stats.BytesUploaded, pip.Size, mb.Config.Size, len(uploaded))

	h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
	pa := h.pull(ctx, t, a.Ref, append([]string{"--trust", pub}, tls...)...)
	r.ResetLog()
	pb := h.pull(ctx, t, b.Ref, append([]string{"--trust", pub}, tls...)...)
	served := r.BytesServed()
	for d := range shared {
		if n := r.BlobGETs(d); n != 0 {
			t.Errorf("pulling the second layer fetched shared blob %s %d times", d, n)
		}
	}
	if n := r.BlobGETs(pip.Digest); n != 1 {
		t.Errorf("pulling the second layer fetched the pip blob %d times, want 1", n)
	}
	// What else is served: two manifests, the lock, the signature manifest and payload.
	if served < pip.Size || served > pip.Size+mb.Config.Size+64<<10 {
		t.Errorf("pulling the second layer served %d B; the pip blob is %d B, the lock %d B", served, pip.Size, mb.Config.Size)
	}
	var total int64
	for _, l := range mb.Layers {
		total += l.Size
	}
	t.Logf("pull 2 into a cache holding layer 1: %d B served by the registry (new pip blob %d B; all layer blobs of layer 2: %d B)", served, pip.Size, total)
	if trees := cacheEntries(t, h.cache, "layers"); len(trees) != 2 || pa.Root == pb.Root {
		t.Errorf("cache holds layers %v, want the two pulled", trees)
	}
	h.must(ctx, t, "doctor")
}
