package interp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
)

// KindPython is the dev.pylayer.kind annotation of interpreter artifacts.
const KindPython = "python"

// Artifact builds the interpreter artifact of prefixOrTarball: either a
// prefix directory (bin/python3, lib/python3.X/, ...) or a
// python-build-standalone install_only tarball (.tar.gz or .tgz, one top
// directory python/), which is first unpacked safely (see ErrUnsafeTarball,
// DefaultLimits) into a new directory under workDir.
//
// The standard library's missing .pyc are compiled first (Compile: into a copy of
// a prefix directory, into the unpacked tarball), then the interpreter is probed
// once (Probe, which also digests the tree into
// Config.Tree, so the key and tag follow from the prefix's bytes, not only its
// version); the prefix is packed with
// oci.TarTreeWith, symlinks inside the tree allowed, into ONE layer blob
// whose tar root is the prefix content (bin/, lib/, ...), written to workDir.
// The artifact has type oci.ArtifactTypePython, the canonical Config as its
// config blob, and the annotations kind "python", key (sha256 of the config
// bytes), python (major.minor) and platform. The same prefix gives the same
// bytes, hence the same manifest digest, on every run; a prefix that differs in
// any byte has another key. Tag it with TagFor.
//
// workDir must exist and outlive the artifact: its layer blob is read from
// there when the artifact is stored or pushed. The prefix is never written.
func Artifact(ctx context.Context, prefixOrTarball, workDir string) (oci.Artifact, Config, error) {
	a, c, err := artifact(ctx, prefixOrTarball, workDir)
	if err != nil {
		return oci.Artifact{}, Config{}, fmt.Errorf("building the interpreter artifact of %s: %w", prefixOrTarball, err)
	}
	return a, c, nil
}

func artifact(ctx context.Context, input, workDir string) (oci.Artifact, Config, error) {
	fi, err := os.Stat(input)
	if err != nil {
		return oci.Artifact{}, Config{}, err
	}
	if fi, err := os.Stat(workDir); err != nil || !fi.IsDir() {
		return oci.Artifact{}, Config{}, fmt.Errorf("work directory %s must be an existing directory", workDir)
	}
	if fi.IsDir() && within(workDir, input) {
		return oci.Artifact{}, Config{}, fmt.Errorf("work directory %s is inside the prefix: choose one outside it", workDir)
	}
	prefix, source, private := input, SourcePrefix, false
	if !fi.IsDir() {
		if !fi.Mode().IsRegular() {
			return oci.Artifact{}, Config{}, fmt.Errorf("not a directory or a regular file")
		}
		base := filepath.Base(input)
		if !strings.HasSuffix(base, ".tar.gz") && !strings.HasSuffix(base, ".tgz") {
			return oci.Artifact{}, Config{}, fmt.Errorf("%q is neither a prefix directory nor a .tar.gz tarball (zstd tarballs: use the install_only .tar.gz, or unpack it and pass the python/ directory)", base)
		}
		if prefix, err = unpackTarball(ctx, input, workDir); err != nil {
			return oci.Artifact{}, Config{}, err
		}
		source, private = base, true
	}
	// The stdlib's .pyc first: the key is the digest of the tree packed, .pyc included.
	b, err := compileStdlib(ctx, prefix, workDir, !private)
	if err != nil {
		return oci.Artifact{}, Config{}, fmt.Errorf("compiling the standard library: %w", err)
	}
	prefix = b.Dir
	c, err := Probe(ctx, prefix)
	if err != nil {
		return oci.Artifact{}, Config{}, err
	}
	c.Source = source
	a, err := pack(ctx, prefix, c, workDir)
	return a, c, err
}

// Pack builds the artifact of a prefix directory that Probe already described as c,
// without probing it again: the prefix is read once more, to pack it, and refused if
// its bytes are no longer the ones c names (Config.Tree). See Artifact. Pack packs the
// prefix as it is: give it, and Probe, Compile's Bytecode.Dir so that the artifact
// carries its standard library compiled, as Artifact's does.
func Pack(ctx context.Context, prefix string, c Config, workDir string) (oci.Artifact, error) {
	if fi, err := os.Stat(workDir); err != nil || !fi.IsDir() {
		return oci.Artifact{}, fmt.Errorf("building the interpreter artifact of %s: work directory %s must be an existing directory", prefix, workDir)
	}
	if within(workDir, prefix) {
		return oci.Artifact{}, fmt.Errorf("building the interpreter artifact of %s: work directory %s is inside the prefix: choose one outside it", prefix, workDir)
	}
	a, err := pack(ctx, prefix, c, workDir)
	if err != nil {
		return oci.Artifact{}, fmt.Errorf("building the interpreter artifact of %s: %w", prefix, err)
	}
	return a, nil
}

func pack(ctx context.Context, prefix string, c Config, workDir string) (oci.Artifact, error) {
	canon, err := c.Canonical()
	if err != nil {
		return oci.Artifact{}, err
	}
	lb, diffID, err := packPrefix(ctx, prefix, workDir)
	if err != nil {
		return oci.Artifact{}, err
	}
	if diffID.String() != c.Tree {
		return oci.Artifact{}, fmt.Errorf("the prefix changed while it was packed (digest %s, packed %s): stop whatever writes into it and publish again", c.Tree, diffID)
	}
	lb.Title = "cpython-" + c.Version + "-" + c.Platform + ".tar.gz"
	a := oci.Artifact{
		ArtifactType: oci.ArtifactTypePython,
		Config:       canon,
		Layers:       []oci.LayerBlob{lb},
		Annotations: map[string]string{
			oci.AnnotationKind:     KindPython,
			oci.AnnotationKey:      KeyOf(canon),
			oci.AnnotationPython:   c.Python(),
			oci.AnnotationPlatform: c.Platform,
		},
	}
	if _, _, err := a.Manifest(); err != nil {
		return oci.Artifact{}, err
	}
	return a, nil
}

func unpackTarball(ctx context.Context, tarball, workDir string) (string, error) {
	f, err := os.Open(tarball)
	if err != nil {
		return "", err
	}
	defer f.Close()
	dir, err := os.MkdirTemp(workDir, "prefix-*")
	if err != nil {
		return "", err
	}
	prefix := filepath.Join(dir, TopDir)
	if err := extract(ctx, f, prefix, DefaultLimits()); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("unpacking %s: %w", filepath.Base(tarball), err)
	}
	return prefix, nil
}

// packPrefix writes the layer blob of prefix to workDir/<hex>.tar.gz through
// a temporary file, fsynced and renamed into place.
func packPrefix(ctx context.Context, prefix, workDir string) (oci.LayerBlob, digest.Digest, error) {
	// The blob's name is its digest, known only once it is written (CommitAs).
	w, err := fsx.Create(ctx, filepath.Join(workDir, "python.tar.gz"), 0o600)
	if err != nil {
		return oci.LayerBlob{}, "", err
	}
	defer w.Cleanup()
	desc, diffID, err := oci.TarTreeWith(ctx, prefix, w, oci.TarTreeOptions{AllowSymlinks: true})
	if err != nil {
		return oci.LayerBlob{}, "", fmt.Errorf("packing %s: %w", prefix, err)
	}
	blob := filepath.Join(workDir, desc.Digest.Encoded()+".tar.gz")
	if err := w.CommitAs(ctx, blob); err != nil {
		return oci.LayerBlob{}, "", err
	}
	return oci.LayerBlob{Path: blob, Desc: desc}, diffID, nil
}

// within reports whether p is dir or below it (after making both absolute).
func within(p, dir string) bool {
	ap, err1 := filepath.Abs(p)
	ad, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(ad, ap)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
