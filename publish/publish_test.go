package publish

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/sign"
	"github.com/pylayer/pylayer/registry"
)

// fixture is an empty OCI layout repository, a signer and its verifier.
func fixture(t *testing.T) (registry.Repo, sign.Signer, *sign.Verifier) {
	t.Helper()
	ctx := context.Background()
	priv, pub, err := sign.GenerateKeyPair([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kp, pp := filepath.Join(dir, "k.key"), filepath.Join(dir, "k.pub")
	if err := os.WriteFile(kp, priv, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pp, pub, 0o644); err != nil {
		t.Fatal(err)
	}
	signer, err := sign.LoadSigner(ctx, kp, func() ([]byte, error) { return []byte("pw"), nil })
	if err != nil {
		t.Fatal(err)
	}
	v, err := sign.LoadVerifier(ctx, pp)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := registry.ParseRef("oci:" + filepath.Join(dir, "layout"))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := registry.Open(ctx, ref, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return repo, signer, v
}

// artifact is a one-layer artifact; its layer blob is written into dir.
func artifact(t *testing.T, dir, key string) oci.Artifact {
	t.Helper()
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "site-packages"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "site-packages", "m.py"), []byte("x = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var blob bytes.Buffer
	desc, _, err := oci.TarTree(context.Background(), tree, &blob)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "layer.tar.gz")
	if err := os.WriteFile(path, blob.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return oci.Artifact{ArtifactType: oci.ArtifactTypeLayer, Config: []byte(`{"lock":"` + key + `"}`),
		Layers:      []oci.LayerBlob{{Path: path, Desc: desc, Title: "m-1.0-py3-none-any.whl", WheelSHA256: digest.FromString("m").Encoded()}},
		Annotations: map[string]string{oci.AnnotationKind: "base", oci.AnnotationKey: key}}
}

// TestPublish: the first publish builds, pushes, signs and tags; the second builds nothing
// and gives the same digest; a failing build leaves the tag missing.
func TestPublish(t *testing.T) {
	ctx := context.Background()
	repo, signer, v := fixture(t)
	a := artifact(t, t.TempDir(), "k1")
	builds := 0
	make := func(context.Context) (oci.Artifact, error) { builds++; return a, nil }
	tests := []struct {
		name       string
		tag        string
		make       Make
		also       []string
		wantPushed bool
		wantBuilds int
		wantErr    bool
	}{
		{"first", "base-k1", make, []string{"current"}, true, 1, false},
		{"again", "base-k1", make, nil, false, 1, false},
		{"build fails", "base-k2", func(context.Context) (oci.Artifact, error) { return oci.Artifact{}, errors.New("no wheel") }, nil, false, 1, true},
	}
	var first digest.Digest
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Publish(ctx, repo, tc.tag, tc.make, signer, tc.also...)
			if tc.wantErr {
				if err == nil {
					t.Fatal("publish succeeded, want the build's error")
				}
				if _, err := repo.Resolve(ctx, tc.tag); !errors.Is(err, registry.ErrNotFound) {
					t.Fatalf("after a failed build the tag resolves (%v), want ErrNotFound", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Pushed != tc.wantPushed || builds != tc.wantBuilds {
				t.Errorf("pushed %v after %d builds, want %v after %d", res.Pushed, builds, tc.wantPushed, tc.wantBuilds)
			}
			if first == "" {
				first = res.Desc.Digest
			} else if res.Desc.Digest != first {
				t.Errorf("digest %s, the first publish gave %s", res.Desc.Digest, first)
			}
			if _, err := sign.Verify(ctx, repo, res.Desc, v); err != nil {
				t.Errorf("not signed by the key: %v", err)
			}
			for _, tag := range tc.also {
				if d, err := repo.Resolve(ctx, tag); err != nil || d.Digest != res.Desc.Digest {
					t.Errorf("tag %s: %v %v, want %s", tag, d.Digest, err, res.Desc.Digest)
				}
			}
			if got, want := res.Ref(repo), repo.Name()+"@"+res.Desc.Digest.String(); got != want {
				t.Errorf("Ref %s, want %s", got, want)
			}
		})
	}
}
