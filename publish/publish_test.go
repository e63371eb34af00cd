package publish

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	"github.com/pylayer/pylayer/oci/sbom"
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

// artifact is a one-layer artifact of a valid lock of wheel m at version; its layer blob
// (a tree with the wheel's METADATA) is written into dir.
func artifact(t *testing.T, dir, version string) oci.Artifact {
	t.Helper()
	return artifactFor(t, dir, version, "manylinux_2_28_x86_64")
}

// artifactFor is artifact locked for the wheel platform tag, annotated as
// oci.LayerArtifact annotates it.
func artifactFor(t *testing.T, dir, version, platform string) oci.Artifact {
	t.Helper()
	tree := filepath.Join(dir, "tree")
	for name, body := range map[string]string{
		"site-packages/m.py": "x = 1\n",
		"site-packages/m-" + version + ".dist-info/METADATA": "Metadata-Version: 2.1\nName: m\nVersion: " + version + "\nLicense: MIT\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(tree, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tree, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
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
	tg, err := target.FromFlags("3.11", platform)
	if err != nil {
		t.Fatal(err)
	}
	whl := "m-" + version + "-py3-none-any.whl"
	l := &lock.Lock{Version: lock.FormatVersion, Kind: lock.KindBase, Target: tg, Requirements: []string{"m"},
		Packages: []lock.Package{{Name: "m", Version: version, Filename: whl, SHA256: digest.FromString("m").Encoded(), Size: 1, RequiredBy: []string{lock.Requested}}}}
	content, err := l.Content()
	if err != nil {
		t.Fatal(err)
	}
	return oci.Artifact{ArtifactType: oci.ArtifactTypeLayer, Config: content,
		Layers:      []oci.LayerBlob{{Path: path, Desc: desc, Title: oci.BlobTitle(whl), Wheel: whl, WheelSHA256: digest.FromString("m").Encoded()}},
		Annotations: map[string]string{oci.AnnotationKind: "base", oci.AnnotationKey: lock.KeyOf(content), oci.AnnotationPython: "3.11", oci.AnnotationPlatform: platform}}
}

// TestPublish: the first publish builds, pushes, signs, attests its SBOM and tags; the
// second builds and writes nothing and gives the same digest; a failing build leaves the
// tag missing.
func TestPublish(t *testing.T) {
	ctx := context.Background()
	repo, signer, v := fixture(t)
	a := artifact(t, t.TempDir(), "1.0")
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
	var first, firstAtt digest.Digest
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
			checkSBOM(t, repo, res, v, a)
			if res.Attested != tc.wantPushed {
				t.Errorf("attested %v, want %v (only the first publish writes one)", res.Attested, tc.wantPushed)
			}
			if firstAtt == "" {
				firstAtt = res.Attestation.Digest
			} else if res.Attestation.Digest != firstAtt {
				t.Errorf("attestation manifest %s, the first publish wrote %s", res.Attestation.Digest, firstAtt)
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

// checkSBOM checks that the artifact res published carries a signed SBOM attestation that
// v verifies, whose predicate is sbom.Generate's document of a.
func checkSBOM(t *testing.T, repo registry.Repo, res Result, v *sign.Verifier, a oci.Artifact) {
	t.Helper()
	ctx := context.Background()
	r, err := sign.VerifyAttestations(ctx, repo, res.Desc, sign.PredicateTypeSPDX, v)
	if err != nil {
		t.Fatalf("no SBOM attestation: %v", err)
	}
	if r.AttestationManifest.Digest != res.Attestation.Digest {
		t.Errorf("Publish reported attestation %s, the tag holds %s", res.Attestation.Digest, r.AttestationManifest.Digest)
	}
	raw, err := repo.Manifest(ctx, res.Desc)
	if err != nil {
		t.Fatal(err)
	}
	want, err := sbom.Generate(ctx, raw, a.Config, sbom.ArtifactBlobs(a))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Last().Statement.Predicate; !bytes.Equal(got, want) {
		t.Errorf("attested SBOM\n%s\nwant\n%s", got, want)
	}
	d, err := sbom.Parse(want)
	if err != nil {
		t.Fatal(err)
	}
	if p := d.Package("SPDXRef-Package-m"); p == nil || p.LicenseDeclared != "MIT" {
		t.Errorf("the SBOM's wheel: %+v, want m under MIT", p)
	}
}

// TestPublishAttestsExisting: an artifact published and signed before SBOMs were attached
// gets its SBOM from the repository's blobs, without a build; another key attests it too.
func TestPublishAttestsExisting(t *testing.T) {
	ctx := context.Background()
	repo, signer, v := fixture(t)
	a := artifact(t, t.TempDir(), "2.0")
	desc, _, err := registry.Push(ctx, repo, a, "base-old")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sign.Sign(ctx, repo, desc, repo.Name(), signer); err != nil {
		t.Fatal(err)
	}
	noBuild := func(context.Context) (oci.Artifact, error) { return oci.Artifact{}, errors.New("built again") }
	res, err := Publish(ctx, repo, "base-old", noBuild, signer)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pushed || !res.Attested || res.Desc.Digest != desc.Digest {
		t.Fatalf("publish of an existing artifact: %+v, want it attested, not pushed", res)
	}
	checkSBOM(t, repo, res, v, a)

	_, other, otherV := fixture(t)
	res2, err := Publish(ctx, repo, "base-old", noBuild, other)
	if err != nil {
		t.Fatal(err)
	}
	if !res2.Attested || res2.Attestation.Digest == res.Attestation.Digest {
		t.Fatalf("another key's publish: %+v, want a second attestation", res2)
	}
	checkSBOM(t, repo, res2, otherV, a)
	checkSBOM(t, repo, res2, v, a) // the first key's attestation stays
}
