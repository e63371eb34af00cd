package registry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/oci"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	"github.com/pylayer/pylayer/registry/cache"
)

// TestBlobVerifiesForCache: Blob's reader tells the host cache that it checks the very
// descriptor asked for (so the cache does not hash the blob again), and a blob the registry
// corrupts is then still refused by the cache's install, which leaves nothing behind.
func TestBlobVerifiesForCache(t *testing.T) {
	ctx := context.Background()
	s := newServer(t, false)
	r := openRepo(t, s, "team/vouch", quick())
	l := layerBlob(t, "vouch", strings.Repeat("check me once\n", 400))
	desc, _, err := Push(ctx, r, artifact("k", l), "t")
	must(t, err)
	raw, err := r.Manifest(ctx, desc)
	must(t, err)
	lr := openLayout(t, filepath.Join(t.TempDir(), "layout"))
	_, _, err = Push(ctx, lr, artifact("k", l), "t")
	must(t, err)

	for name, repo := range map[string]Repo{"registry": r, "layout": lr} {
		rc, err := repo.Blob(ctx, l.Desc)
		must(t, err)
		v, ok := rc.(cache.Verifier)
		if !ok || v.VerifiesDescriptor().Digest != l.Desc.Digest || v.VerifiesDescriptor().Size != l.Desc.Size {
			t.Errorf("%s: Blob returns %T, not a cache.Verifier of %s", name, rc, l.Desc.Digest)
		}
		rc.Close()
	}

	blob, err := os.ReadFile(l.Path)
	must(t, err)
	s.setFault(func(w http.ResponseWriter, req *http.Request) bool {
		if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, string(l.Desc.Digest)) {
			s.reg.ServeHTTP(&flipWriter{ResponseWriter: w, at: len(blob) / 2}, req)
			return true
		}
		return false
	})
	defer s.setFault(nil)
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"))
	must(t, err)
	fetch := func(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) { return r.Blob(ctx, d) }
	if _, err := c.Install(ctx, desc.Digest, raw, fetch, nil); !errors.Is(err, oci.ErrDigestMismatch) {
		t.Fatalf("install of a corrupted blob: %v, want ErrDigestMismatch", err)
	}
	for _, d := range []string{"trees/sha256", "layers/sha256", "tmp"} {
		if left, _ := os.ReadDir(filepath.Join(c.Root(), d)); len(left) != 0 {
			t.Errorf("%s holds %d entries after the refused install", d, len(left))
		}
	}
}
