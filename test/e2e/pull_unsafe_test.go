package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/sign"
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
	l, err := lock.ReadFile(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range []struct{ name, body string }{
		{"site-packages/ok.py", "print('fine')\n"},
		{"site-packages/../../escaped.py", "print('escaped')\n"},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(sharedDir(t), "layer.tar.gz")
	if err := os.WriteFile(blob, buf.Bytes(), 0o644); err != nil {
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
			Desc:        v1.Descriptor{MediaType: oci.MediaTypeLayer, Digest: digest.FromBytes(buf.Bytes()), Size: int64(buf.Len())},
			Title:       oci.BlobTitle(l.Packages[0].Filename),
			Wheel:       l.Packages[0].Filename,
			WheelSHA256: l.Packages[0].SHA256,
		}},
		Annotations: map[string]string{oci.AnnotationKind: string(l.Kind), oci.AnnotationKey: key},
	}
	ref, err := registry.ParseRef(r.Ref("team/unsafe"))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := registry.Open(ctx, ref, registry.Options{CAFile: r.CAFile, Keychain: staticKeychain{r.User, r.Password}})
	if err != nil {
		t.Fatal(err)
	}
	desc, _, err := registry.Push(ctx, repo, a, "unsafe")
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

	h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
	stderr := h.refuse(ctx, t, "pull", repo.Name()+"@"+desc.Digest.String(), "--trust", pub, "--ca-file", r.CAFile)
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
