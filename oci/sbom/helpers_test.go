package sbom

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	"github.com/pylayer/pylayer/oci/interp"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// testWheel is one wheel of a test layer: its lock entry and the METADATA its tree holds
// ("" for none).
type testWheel struct {
	name, version string
	requiredBy    []string
	metadata      string
}

func testTarget(t testing.TB) target.Target {
	t.Helper()
	tg, err := target.FromFlags("3.11", "manylinux_2_28_x86_64")
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// layerArtifact builds a layer artifact of the wheels: a valid lock as its config, one
// reproducible layer blob per wheel in lock order, each a tree with the wheel's METADATA.
func layerArtifact(t testing.TB, wheels ...testWheel) (oci.Artifact, []byte) {
	t.Helper()
	l := &lock.Lock{Version: lock.FormatVersion, Kind: lock.KindBase, Target: testTarget(t), Requirements: []string{}}
	byName := map[string]testWheel{}
	for _, w := range wheels {
		sum := sha256.Sum256([]byte(w.name + w.version))
		by := w.requiredBy
		if by == nil {
			by = []string{lock.Requested}
			l.Requirements = append(l.Requirements, w.name)
		}
		l.Packages = append(l.Packages, lock.Package{Name: w.name, Version: w.version,
			Filename: strings.ReplaceAll(w.name, "-", "_") + "-" + w.version + "-py3-none-any.whl",
			SHA256:   hex.EncodeToString(sum[:]), Size: 100, RequiredBy: by})
		byName[w.name] = w
	}
	content, err := l.Content()
	if err != nil {
		t.Fatal(err)
	}
	l, err = lock.Parse(content) // in lock order
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a := oci.Artifact{ArtifactType: oci.ArtifactTypeLayer, Config: content,
		Annotations: map[string]string{oci.AnnotationKind: string(l.Kind), oci.AnnotationKey: lock.KeyOf(content)}}
	for _, p := range l.Packages {
		w := byName[p.Name]
		tree := filepath.Join(dir, "tree", p.Name)
		pkgDir := filepath.Join(tree, "site-packages", strings.ReplaceAll(p.Name, "-", "_"))
		mustWrite(t, filepath.Join(pkgDir, "__init__.py"), "VERSION = '"+p.Version+"'\n")
		if w.metadata != "" {
			// bin/ and a sibling package sort around the dist-info.
			mustWrite(t, filepath.Join(tree, "bin", p.Name), "#!/bin/sh\n")
			mustWrite(t, filepath.Join(tree, "site-packages", strings.ReplaceAll(p.Name, "-", "_")+"-"+p.Version+".dist-info", "METADATA"), w.metadata)
		}
		blob := filepath.Join(dir, p.Name+".tar.gz")
		f, err := os.Create(blob)
		if err != nil {
			t.Fatal(err)
		}
		desc, _, err := oci.TarTree(context.Background(), tree, f)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		a.Layers = append(a.Layers, oci.LayerBlob{Path: blob, Desc: desc, Title: oci.BlobTitle(p.Filename), Wheel: p.Filename, WheelSHA256: p.SHA256})
	}
	m, _, err := a.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	return a, m
}

func mustWrite(t testing.TB, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// interpreterConfig is a valid interpreter config for the test target.
func interpreterConfig(t testing.TB, source string) []byte {
	t.Helper()
	tg, err := target.FromFlags("3.11.2", "manylinux_2_28_x86_64")
	if err != nil {
		t.Fatal(err)
	}
	markers := map[string]string{}
	for k, v := range tg.Markers {
		markers[k] = v
	}
	markers["platform_release"], markers["platform_version"] = "", ""
	var tags []string
	for _, tag := range tg.Tags() {
		tags = append(tags, tag.String())
	}
	c := interp.Config{Version: tg.PythonFull, Implementation: tg.Implementation, ABI: tg.ABI, Platform: tg.Platform,
		Platforms: tg.Platforms, Tags: tags, Markers: markers, MountPath: interp.MountPath, Source: source,
		Tree: "sha256:" + strings.Repeat("ab", 32)}
	b, err := c.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// generate runs Generate on a and parses the document.
func generate(t testing.TB, a oci.Artifact, manifest []byte) ([]byte, *Document) {
	t.Helper()
	b, err := Generate(context.Background(), manifest, a.Config, ArtifactBlobs(a))
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	d, err := Parse(b)
	if err != nil {
		t.Fatalf("Parse of Generate's bytes: %v\n%s", err, b)
	}
	return b, d
}

// memBlobs serves blobs from memory, as a registry would (without checking them).
type memBlobs map[digest.Digest][]byte

func (m memBlobs) Blob(_ context.Context, d v1.Descriptor) (io.ReadCloser, error) {
	b, ok := m[d.Digest]
	if !ok {
		return nil, oci.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func memBlobsOf(t testing.TB, a oci.Artifact) memBlobs {
	t.Helper()
	m := memBlobs{}
	for _, l := range a.Layers {
		b, err := os.ReadFile(l.Path)
		if err != nil {
			t.Fatal(err)
		}
		m[l.Desc.Digest] = b
	}
	return m
}

// canonicalJSON reports whether b is what re-encoding it with sorted keys gives.
func canonicalJSON(b []byte) bool {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return false
	}
	again, err := json.Marshal(v)
	return err == nil && bytes.Equal(again, b)
}
