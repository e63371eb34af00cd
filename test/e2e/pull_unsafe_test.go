package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/klauspost/compress/zstd"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	"github.com/pylayer/pylayer/oci/sign"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	"github.com/pylayer/pylayer/registry"
	registrytest "github.com/pylayer/pylayer/test/registry"
)

// staticKeychain hands the registry's credentials to the in-process client.
type staticKeychain struct{ user, password string }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	return authn.FromConfig(authn.AuthConfig{Username: k.user, Password: k.password}), nil
}

// unsafeLayer hand-builds a pylayer artifact whose one layer tar has an entry that climbs
// out of the tree ("site-packages/../../escaped.py"), pushes and signs it in process with a
// trusted key, and checks that the pylayer binary refuses to pull it and unpacks nothing.
// The lock is a real one (lockPath), so nothing but the tar is wrong.
func unsafeLayer(ctx context.Context, t *testing.T, r *registrytest.Registry, lockPath, priv, pub string) {
	blob := gzipped(t, tarOf(t, map[string]string{
		"site-packages/ok.py":            "print('fine')\n",
		"site-packages/../../escaped.py": "print('escaped')\n",
	}))
	ref := pushHandBuilt(ctx, t, r, "team/unsafe", lockPath, priv, v1.MediaTypeImageLayerGzip, blob)
	h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
	stderr := h.refuse(ctx, t, "pull", ref, "--trust", pub, "--ca-file", r.CAFile)
	for _, s := range []string{"unsafe layer archive", "escaped.py"} {
		if !strings.Contains(stderr, s) {
			t.Errorf("stderr does not mention %q:\n%s", s, stderr)
		}
	}
	assertNothingUnpacked(t, h.cache)
	for _, p := range []string{filepath.Join(h.cache, "escaped.py"), filepath.Join(h.home, "escaped.py"), filepath.Join(h.cache, "trees", "escaped.py")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was written", p)
		}
	}
	t.Logf("refused: %s", strings.TrimSpace(stderr))
}

// zstdLayer: a signed artifact whose layer blob is a tar+zstd, as another OCI producer
// may write it, pulls from the real registry into a read-only tree holding the tar's
// files, byte for byte.
func zstdLayer(ctx context.Context, t *testing.T, r *registrytest.Registry, lockPath, priv, pub string) {
	files := map[string]string{"site-packages/zs/__init__.py": "ANSWER = 42\n", "site-packages/zs/data.txt": strings.Repeat("zstd ", 1000)}
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(tarOf(t, files)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	ref := pushHandBuilt(ctx, t, r, "team/zstd", lockPath, priv, v1.MediaTypeImageLayerZstd, buf.Bytes())
	h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
	p := h.pull(ctx, t, ref, "--trust", pub, "--ca-file", r.CAFile)
	for name, want := range files {
		path := filepath.Join(p.Root, name)
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("%s: %d bytes (%v), want the tar's %d", name, len(got), err, len(want))
		}
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o222 != 0 {
			t.Errorf("%s is writable (%v)", name, fi.Mode())
		}
	}
}

// tarOf is a tar of regular files, named as given (unchecked: a test may want a bad name).
func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range names {
		body := files[name]
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipped(t *testing.T, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	if _, err := gz.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pushHandBuilt pushes an artifact of the real lock at lockPath with the one layer blob
// given (of mediaType) to repo name on r, signs it in process with the key priv, and
// returns its reference by digest.
func pushHandBuilt(ctx context.Context, t *testing.T, r *registrytest.Registry, name, lockPath, priv, mediaType string, b []byte) string {
	t.Helper()
	l, err := lock.ReadFile(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(t.TempDir(), "layer.blob")
	if err := os.WriteFile(blob, b, 0o644); err != nil {
		t.Fatal(err)
	}
	key, err := l.Key() // the key and the config blob are the lock's content, without its URLs
	if err != nil {
		t.Fatal(err)
	}
	content, err := l.Content()
	if err != nil {
		t.Fatal(err)
	}
	a := oci.Artifact{
		ArtifactType: oci.ArtifactTypeLayer,
		Config:       content,
		Layers: []oci.LayerBlob{{
			Path:        blob,
			Desc:        v1.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(b), Size: int64(len(b))},
			Title:       oci.BlobTitle(l.Packages[0].Filename),
			Wheel:       l.Packages[0].Filename,
			WheelSHA256: l.Packages[0].SHA256,
		}},
		Annotations: map[string]string{oci.AnnotationKind: string(l.Kind), oci.AnnotationKey: key},
	}
	ref, err := registry.ParseRef(r.Ref(name))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := registry.Open(ctx, ref, registry.Options{CAFile: r.CAFile, Keychain: staticKeychain{r.User, r.Password}})
	if err != nil {
		t.Fatal(err)
	}
	desc, _, err := registry.Push(ctx, repo, a, "hand-built")
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
	return repo.Name() + "@" + desc.Digest.String()
}
