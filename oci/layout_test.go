//go:build unix

package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// layerFile builds a one-file layer with TarTree into a file and returns it.
func layerFile(t *testing.T, name, content string) LayerBlob {
	t.Helper()
	tree := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(tree, "site-packages"), 0o755))
	must(t, os.WriteFile(filepath.Join(tree, "site-packages", name+".py"), []byte(content), 0o644))
	f, err := os.Create(filepath.Join(t.TempDir(), name+".tar.gz"))
	must(t, err)
	defer f.Close()
	desc, _, err := TarTree(context.Background(), tree, f)
	must(t, err)
	return LayerBlob{
		Path:        f.Name(),
		Desc:        desc,
		Title:       BlobTitle(name + "-1.0-py3-none-any.whl"),
		Wheel:       name + "-1.0-py3-none-any.whl",
		WheelSHA256: digest.FromString(name).Encoded(),
	}
}

func testArtifact(t *testing.T, key string, layers ...LayerBlob) Artifact {
	return Artifact{
		ArtifactType: ArtifactTypeLayer,
		Config:       []byte(fmt.Sprintf(`{"key":%q}`, key)),
		Layers:       layers,
		Annotations:  map[string]string{AnnotationKind: "base", AnnotationKey: key},
	}
}

func TestLayoutRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "layout")
	l, err := OpenLayout(dir)
	must(t, err)
	la, lb := layerFile(t, "alpha", "A = 1\n"), layerFile(t, "beta", "B = 2\n")
	a := testArtifact(t, "k1", la, lb)
	desc, err := l.Put(ctx, a, "base-k1")
	must(t, err)
	if _, err := l.Put(ctx, testArtifact(t, "k2", lb), "other"); err != nil {
		t.Fatal(err)
	}

	got, err := l.Resolve(ctx, "base-k1")
	must(t, err)
	wantBytes, wantDesc, _ := a.Manifest()
	if got.Digest != wantDesc.Digest || got.Size != wantDesc.Size || got.Digest != desc.Digest ||
		got.MediaType != v1.MediaTypeImageManifest || got.ArtifactType != ArtifactTypeLayer ||
		got.Annotations[v1.AnnotationRefName] != "base-k1" {
		t.Errorf("Resolve = %+v, Put = %+v, want digest %s", got, desc, wantDesc.Digest)
	}
	m, b, err := l.Manifest(ctx, got.Digest)
	must(t, err)
	if !bytes.Equal(b, wantBytes) || len(m.Layers) != 2 || m.Layers[1].Digest != lb.Desc.Digest {
		t.Errorf("Manifest returned other bytes:\n%s\nwant\n%s", b, wantBytes)
	}
	for _, d := range []digest.Digest{m.Config.Digest, la.Desc.Digest, lb.Desc.Digest, got.Digest} {
		if !l.HasBlob(d) {
			t.Errorf("blob %s missing", d)
		}
	}
	if _, err := l.Resolve(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Resolve(missing) = %v, want ErrNotFound", err)
	}
	if _, err := l.Resolve(ctx, "bad/tag"); !errors.Is(err, ErrInvalidTag) {
		t.Errorf("Resolve(bad tag) = %v, want ErrInvalidTag", err)
	}

	// Re-putting a tag replaces the entry; reopening keeps everything.
	a2 := testArtifact(t, "k3", la)
	desc2, err := l.Put(ctx, a2, "base-k1")
	must(t, err)
	l2, err := OpenLayout(dir)
	must(t, err)
	if got, err := l2.Resolve(ctx, "base-k1"); err != nil || got.Digest != desc2.Digest {
		t.Errorf("after re-put: Resolve = %v, %v; want %s", got.Digest, err, desc2.Digest)
	}
	idx, err := l2.readIndex()
	must(t, err)
	if len(idx.Manifests) != 2 || idx.Manifests[0].Annotations[v1.AnnotationRefName] != "base-k1" {
		t.Errorf("index entries %+v, want base-k1 then other", idx.Manifests)
	}
	if raw, _ := os.ReadFile(filepath.Join(dir, "oci-layout")); string(raw) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %s", raw)
	}
	assertNoTemps(t, dir)
}

// TestLayoutGGCR reads the layout back with go-containerregistry, as crane,
// and other OCI tools that read layouts, would.
func TestLayoutGGCR(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := OpenLayout(dir)
	must(t, err)
	la, lb := layerFile(t, "alpha", "A = 1\n"), layerFile(t, "beta", "B = 2\n")
	desc, err := l.Put(ctx, testArtifact(t, "k1", la, lb), "base-k1")
	must(t, err)

	p, err := layout.FromPath(dir)
	must(t, err)
	ii, err := p.ImageIndex()
	must(t, err)
	im, err := ii.IndexManifest()
	must(t, err)
	if len(im.Manifests) != 1 || im.Manifests[0].Digest.String() != string(desc.Digest) ||
		im.Manifests[0].Annotations[v1.AnnotationRefName] != "base-k1" || string(im.Manifests[0].ArtifactType) != ArtifactTypeLayer {
		t.Fatalf("ggcr index %+v", im)
	}
	img, err := ii.Image(im.Manifests[0].Digest)
	must(t, err)
	mf, err := img.Manifest()
	must(t, err)
	if string(mf.Config.MediaType) != MediaTypeLock || mf.ArtifactType != ArtifactTypeLayer || mf.Annotations[v1.AnnotationCreated] != CreatedEpoch {
		t.Errorf("ggcr manifest %+v", mf)
	}
	cfg, err := img.RawConfigFile()
	must(t, err)
	if string(cfg) != `{"key":"k1"}` {
		t.Errorf("config = %s", cfg)
	}
	layers, err := img.Layers()
	must(t, err)
	if len(layers) != 2 {
		t.Fatalf("%d layers", len(layers))
	}
	for i, want := range []LayerBlob{la, lb} {
		d, err := layers[i].Digest()
		must(t, err)
		rc, err := layers[i].Compressed()
		must(t, err)
		b, err := io.ReadAll(rc)
		rc.Close()
		must(t, err)
		if d.String() != string(want.Desc.Digest) || string(digest.FromBytes(b)) != string(want.Desc.Digest) {
			t.Errorf("layer %d: digest %s, content %s, want %s", i, d, digest.FromBytes(b), want.Desc.Digest)
		}
		rc, err = layers[i].Uncompressed()
		must(t, err)
		if _, err := io.Copy(io.Discard, rc); err != nil {
			t.Errorf("layer %d: uncompressing: %v", i, err)
		}
		rc.Close()
	}
}

func TestLayoutTampered(t *testing.T) {
	ctx := context.Background()
	l, err := OpenLayout(t.TempDir())
	must(t, err)
	la := layerFile(t, "alpha", "A = 1\n")
	desc, err := l.Put(ctx, testArtifact(t, "k1", la), "t")
	must(t, err)

	flip := func(d digest.Digest) {
		p := l.BlobPath(d)
		b, err := os.ReadFile(p)
		must(t, err)
		b[len(b)/2] ^= 1
		must(t, os.WriteFile(p, b, 0o644))
	}
	flip(la.Desc.Digest)
	rc, err := l.OpenBlob(ctx, la.Desc)
	must(t, err)
	if _, err := io.ReadAll(rc); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("reading tampered layer: %v, want ErrDigestMismatch", err)
	}
	rc.Close()

	flip(desc.Digest)
	if _, _, err := l.Manifest(ctx, desc.Digest); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("reading tampered manifest: %v, want ErrDigestMismatch", err)
	}
	// A truncated blob is refused on open.
	must(t, os.Truncate(l.BlobPath(la.Desc.Digest), 3))
	if _, err := l.OpenBlob(ctx, la.Desc); !errors.Is(err, ErrSizeMismatch) {
		t.Errorf("opening truncated blob: %v, want ErrSizeMismatch", err)
	}
	// Hostile digests never reach the file system.
	for _, d := range []digest.Digest{"sha256:../../oci-layout", "", "sha256", "md5:00", digest.Digest("sha256:" + strings.Repeat("A", 64))} {
		if p := l.BlobPath(d); p != "" {
			t.Errorf("BlobPath(%q) = %q, want \"\"", d, p)
		}
		if l.HasBlob(d) {
			t.Errorf("HasBlob(%q) = true", d)
		}
		if _, _, err := l.Manifest(ctx, d); !errors.Is(err, ErrInvalidDigest) {
			t.Errorf("Manifest(%q) = %v, want ErrInvalidDigest", d, err)
		}
	}
	if _, _, err := l.Manifest(ctx, digest.FromString("absent")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Manifest(absent) = %v, want ErrNotFound", err)
	}
}

func TestWriteBlob(t *testing.T) {
	ctx := context.Background()
	content := []byte("some blob content")
	good := v1.Descriptor{Digest: digest.FromBytes(content), Size: int64(len(content))}
	tests := []struct {
		name string
		desc v1.Descriptor
		want error
	}{
		{"ok", good, nil},
		{"wrong digest", v1.Descriptor{Digest: digest.FromString("other"), Size: good.Size}, ErrDigestMismatch},
		{"too short", v1.Descriptor{Digest: good.Digest, Size: good.Size + 1}, ErrSizeMismatch},
		{"too long", v1.Descriptor{Digest: good.Digest, Size: good.Size - 1}, ErrSizeMismatch},
		{"bad digest", v1.Descriptor{Digest: "sha256:zz", Size: good.Size}, ErrInvalidDigest},
		{"negative size", v1.Descriptor{Digest: good.Digest, Size: -1}, ErrSizeMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l, err := OpenLayout(dir)
			must(t, err)
			err = l.WriteBlob(ctx, bytes.NewReader(content), tt.desc)
			if !errors.Is(err, tt.want) {
				t.Fatalf("WriteBlob = %v, want %v", err, tt.want)
			}
			if (err == nil) != l.HasBlob(tt.desc.Digest) {
				t.Errorf("HasBlob = %v after WriteBlob = %v", l.HasBlob(tt.desc.Digest), err)
			}
			assertNoTemps(t, dir)
		})
	}
	// An existing blob of the right size is not read again; one of the wrong
	// size (a torn write) is replaced.
	l, err := OpenLayout(t.TempDir())
	must(t, err)
	must(t, l.WriteBlob(ctx, bytes.NewReader(content), good))
	must(t, l.WriteBlob(ctx, failingReader{}, good))
	must(t, os.WriteFile(l.BlobPath(good.Digest), content[:4], 0o644))
	must(t, l.WriteBlob(ctx, bytes.NewReader(content), good))
	if b, _ := os.ReadFile(l.BlobPath(good.Digest)); !bytes.Equal(b, content) {
		t.Errorf("torn blob not replaced: %q", b)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	other := []byte("other")
	if err := l.WriteBlob(cctx, bytes.NewReader(other), v1.Descriptor{Digest: digest.FromBytes(other), Size: 5}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled WriteBlob = %v", err)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("must not be read") }

func TestLayoutConcurrentPut(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	la, lb := layerFile(t, "alpha", "A\n"), layerFile(t, "beta", "B\n")
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() {
			// A Layout per goroutine, as separate processes would have.
			l, err := OpenLayout(dir)
			if err != nil {
				errs <- err
				return
			}
			tag := fmt.Sprintf("tag-%d", i)
			_, err = l.Put(ctx, testArtifact(t, tag, la, lb), tag)
			errs <- err
			_, err = l.Put(ctx, testArtifact(t, tag, lb), "shared")
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	l, err := OpenLayout(dir)
	must(t, err)
	idx, err := l.readIndex()
	must(t, err)
	if len(idx.Manifests) != n+1 {
		t.Fatalf("index has %d entries, want %d: %+v", len(idx.Manifests), n+1, idx.Manifests)
	}
	for i := range n {
		if _, err := l.Resolve(ctx, fmt.Sprintf("tag-%d", i)); err != nil {
			t.Error(err)
		}
	}
	if _, err := l.Resolve(ctx, "shared"); err != nil {
		t.Error(err)
	}
	assertNoTemps(t, dir)
}

func TestLayoutAfterCrash(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := OpenLayout(dir)
	must(t, err)
	la := layerFile(t, "alpha", "A\n")
	_, err = l.Put(ctx, testArtifact(t, "k0", la), "before")
	must(t, err)
	// What a writer killed mid-way leaves: temp files in blobs/ and the
	// root, a torn blob under its final name, the lock file.
	lb := layerFile(t, "beta", "B\n")
	must(t, os.WriteFile(filepath.Join(dir, "blobs", tmpPrefix+"blob-123"), []byte("partial"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, tmpPrefix+"index.json-456"), []byte(`{"schemaVer`), 0o600))
	must(t, os.WriteFile(l.BlobPath(lb.Desc.Digest), []byte("torn"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, lockFile), nil, 0o644))

	l, err = OpenLayout(dir)
	must(t, err)
	_, err = l.Put(ctx, testArtifact(t, "k1", la, lb), "after")
	must(t, err)
	for _, tag := range []string{"before", "after"} {
		d, err := l.Resolve(ctx, tag)
		must(t, err)
		m, _, err := l.Manifest(ctx, d.Digest)
		must(t, err)
		for _, ld := range m.Layers {
			rc, err := l.OpenBlob(ctx, ld)
			must(t, err)
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil {
				t.Errorf("%s: layer %s: %v", tag, ld.Digest, err)
			}
		}
	}
}

func TestOpenLayoutInvalid(t *testing.T) {
	tests := []struct {
		name, file, content string
	}{
		{"layout not JSON", "oci-layout", "{"},
		{"layout version", "oci-layout", `{"imageLayoutVersion":"2.0.0"}`},
		{"index not JSON", "index.json", "nope"},
		{"index schema", "index.json", `{"schemaVersion":1,"manifests":[]}`},
		{"index media type", "index.json", `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}`},
		{"index traversal", "index.json", `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:../../x","size":1}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			must(t, os.WriteFile(filepath.Join(dir, tt.file), []byte(tt.content), 0o644))
			if _, err := OpenLayout(dir); !errors.Is(err, ErrInvalidLayout) {
				t.Errorf("OpenLayout = %v, want ErrInvalidLayout", err)
			}
		})
	}
	if _, err := OpenLayout(""); !errors.Is(err, ErrInvalidLayout) {
		t.Errorf("OpenLayout(\"\") = %v", err)
	}
	// A layout another tool created (indented JSON, existing entries) opens.
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "oci-layout"), []byte("{\n  \"imageLayoutVersion\": \"1.0.0\"\n}\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "index.json"), []byte(`{"schemaVersion":2,"manifests":[]}`), 0o644))
	if _, err := OpenLayout(dir); err != nil {
		t.Errorf("OpenLayout(foreign) = %v", err)
	}
}

func TestPutInvalid(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := OpenLayout(dir)
	must(t, err)
	la := layerFile(t, "alpha", "A\n")
	if _, err := l.Put(ctx, testArtifact(t, "k", la), "bad tag"); !errors.Is(err, ErrInvalidTag) {
		t.Errorf("bad tag: %v", err)
	}
	bad := la
	bad.Desc.Digest = digest.FromString("not the file")
	if _, err := l.Put(ctx, testArtifact(t, "k", bad), "t"); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("layer file not matching its descriptor: %v, want ErrDigestMismatch", err)
	}
	missing := la
	missing.Path = filepath.Join(dir, "missing")
	if _, err := l.Put(ctx, testArtifact(t, "k", missing), "t"); err == nil {
		t.Error("missing layer file: no error")
	}
	if _, err := l.Resolve(ctx, "t"); !errors.Is(err, ErrNotFound) {
		t.Errorf("failed Put left a tag: %v", err)
	}
}

// assertNoTemps fails if a temporary file is left in the layout.
func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	for _, sub := range []string{".", "blobs", "blobs/sha256"} {
		ents, err := os.ReadDir(filepath.Join(dir, sub))
		must(t, err)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), tmpPrefix) {
				t.Errorf("temporary file left: %s/%s", sub, e.Name())
			}
		}
	}
}
