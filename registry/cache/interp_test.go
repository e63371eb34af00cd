package cache

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
)

// pythonArtifact packs a small prefix with symlinks as an interpreter artifact.
func pythonArtifact(t testing.TB, blobs map[digest.Digest][]byte, lbs []oci.LayerBlob) fixture {
	t.Helper()
	config := []byte(`{"version":"3.11.2","mount_path":"/opt/python"}`)
	a := oci.Artifact{
		ArtifactType: oci.ArtifactTypePython,
		Config:       config,
		Layers:       lbs,
		Annotations:  map[string]string{oci.AnnotationKind: "python", oci.AnnotationKey: digest.FromBytes(config).Encoded()},
	}
	mb, desc, err := a.Manifest()
	must(t, err)
	blobs[digest.FromBytes(config)] = config
	m, err := oci.ParseManifest(mb)
	must(t, err)
	return fixture{md: desc.Digest, manifest: mb, blobs: blobs, layers: m.Layers}
}

func prefixBlob(t testing.TB) (map[digest.Digest][]byte, []oci.LayerBlob) {
	t.Helper()
	dir := makeTree(t, map[string]string{"bin/python3.11*": "ELF", "lib/python3.11/os.py": "# os\n"})
	must(t, os.Symlink("python3.11", filepath.Join(dir, "bin/python3")))
	must(t, os.Symlink("../bin/python3.11", filepath.Join(dir, "lib/python")))
	var buf bytes.Buffer
	desc, _, err := oci.TarTreeWith(context.Background(), dir, &buf, oci.TarTreeOptions{AllowSymlinks: true})
	must(t, err)
	return map[digest.Digest][]byte{desc.Digest: buf.Bytes()}, []oci.LayerBlob{{Desc: desc, Title: "cpython-3.11.2.tar.gz"}}
}

// TestInstallInterpreter: an interpreter artifact keeps its in-tree symlinks, the cache
// stays consistent, and the same links are refused in a package layer.
func TestInstallInterpreter(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	s := newStore()
	pb, pl := prefixBlob(t)
	fx := s.add(pythonArtifact(t, pb, pl))
	root, err := c.Install(ctx, fx.md, fx.manifest, s.fetch, nil)
	must(t, err)
	for link, want := range map[string]string{"bin/python3": "python3.11", "lib/python": "../bin/python3.11"} {
		if got, err := os.Readlink(filepath.Join(root, link)); err != nil || got != want {
			t.Errorf("%s -> %q (%v), want %q", link, got, err, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "bin/python3")); err != nil || string(b) != "ELF" {
		t.Errorf("through the link: %q, %v", b, err)
	}
	assertConsistent(t, c)

	// The same blob in a package layer: its tree exists now, but the layer is refused.
	blobs, lbs := prefixBlob(t)
	lbs[0].WheelSHA256 = fx.layers[0].Digest.Encoded()
	lfx := s.add(rawArtifact(t, "with-links", blobs, lbs))
	if _, err := c.Install(ctx, lfx.md, lfx.manifest, s.fetch, nil); !errors.Is(err, ErrUnsafeArchive) {
		t.Errorf("package layer over an interpreter tree: %v, want ErrUnsafeArchive", err)
	}
	// And in a fresh cache, where the blob is unpacked for the package layer first.
	c2 := openCache(t)
	if _, err := c2.Install(ctx, lfx.md, lfx.manifest, s.fetch, nil); !errors.Is(err, ErrUnsafeArchive) {
		t.Errorf("package layer with links: %v, want ErrUnsafeArchive", err)
	}
	assertConsistent(t, c2)
}

// TestInstallInterpreterRefuses: links that leave the tree, or could, are refused even
// for interpreters, and so is writing through a link.
func TestInstallInterpreterRefuses(t *testing.T) {
	ctx := context.Background()
	link := func(name, target string) entry {
		return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}}
	}
	for name, ents := range map[string][]entry{
		"absolute":      {dir("bin/"), link("bin/python3", "/usr/bin/python3")},
		"escaping":      {dir("bin/"), link("bin/etc", "../../etc")},
		"unclean":       {dir("bin/"), link("bin/x", "y/../..")},
		"through link":  {dir("lib/"), link("lib/up", ".."), reg("lib/up/evil", "x")},
		"hardlink":      {reg("a", "x"), {hdr: tar.Header{Name: "b", Typeflag: tar.TypeLink, Linkname: "a"}}},
		"link over dir": {dir("bin/"), link("bin", ".")},
	} {
		c := openCache(t)
		s := newStore()
		b, l := blobOf(t, "p.tar.gz", rawTarGz(t, ents...))
		fx := s.add(pythonArtifact(t, b, l))
		if _, err := c.Install(ctx, fx.md, fx.manifest, s.fetch, nil); !errors.Is(err, ErrUnsafeArchive) {
			t.Errorf("%s: %v, want ErrUnsafeArchive", name, err)
		}
		assertNothingLeft(t, c)
	}
}
