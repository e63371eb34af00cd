package registry

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

func openLayout(t *testing.T, dir string) Repo {
	t.Helper()
	ref, err := ParseRef("oci:" + dir)
	must(t, err)
	r, err := Open(context.Background(), ref, Options{})
	must(t, err)
	return r
}

func TestLayoutRepoRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "layout")
	r := openLayout(t, dir)
	if r.Name() != "oci:"+dir {
		t.Errorf("Name() = %q", r.Name())
	}
	// Reading creates nothing.
	if _, err := r.Resolve(ctx, "t"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Resolve before any push: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("reading created the layout: %v", err)
	}

	ls := layers(t, 3, "l")
	a := artifact("k", ls...)
	desc, st, err := Push(ctx, r, a, "base-k")
	must(t, err)
	if st != (PushStats{Blobs: 4, Uploaded: 4, BytesUploaded: st.BytesUploaded}) {
		t.Errorf("stats %+v", st)
	}
	if _, st, err = Push(ctx, r, a, "base-k"); err != nil || st.Uploaded != 0 || st.Skipped != 4 {
		t.Errorf("second push: %+v, %v", st, err)
	}

	got, err := r.Resolve(ctx, "base-k")
	must(t, err)
	if got.Digest != desc.Digest || got.Size != desc.Size || got.ArtifactType != oci.ArtifactTypeLayer || got.Annotations != nil {
		t.Errorf("Resolve = %+v, want %+v", got, desc)
	}
	raw, err := r.Manifest(ctx, got)
	must(t, err)
	m, err := oci.ParseManifest(raw)
	must(t, err)
	rc, err := r.Blob(ctx, m.Layers[1])
	must(t, err)
	data, err := io.ReadAll(rc)
	rc.Close()
	must(t, err)
	if file, _ := os.ReadFile(ls[1].Path); string(file) != string(data) {
		t.Error("layer bytes differ")
	}

	// oci.Layout reads the same layout (and the same index.json protocol).
	l, err := oci.OpenLayout(dir)
	must(t, err)
	od, err := l.Resolve(ctx, "base-k")
	must(t, err)
	if od.Digest != desc.Digest {
		t.Errorf("oci.Layout resolves %s", od.Digest)
	}
	if _, err := l.Put(ctx, artifact("k2", ls[0]), "base-k2"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Resolve(ctx, "base-k2"); err != nil {
		t.Errorf("a tag oci.Layout.Put wrote: %v", err)
	}
	if _, err := r.Resolve(ctx, "base-k"); err != nil {
		t.Errorf("our tag after oci.Layout.Put: %v", err)
	}

	// A manifest whose blobs are missing is refused; a tag never dangles.
	orphan := strings.Replace(string(raw), string(m.Layers[0].Digest), "sha256:"+strings.Repeat("0", 64), 1)
	if _, err := r.PushManifest(ctx, []byte(orphan), v1.MediaTypeImageManifest, "orphan"); !errors.Is(err, ErrNotFound) {
		t.Errorf("orphan manifest: %v", err)
	}
	if _, err := r.PushManifest(ctx, raw, v1.MediaTypeImageManifest, "bad tag"); err == nil {
		t.Error("invalid tag accepted")
	}

	// Tampered blob: caught on open (size) or at EOF (digest).
	p := l.BlobPath(m.Layers[2].Digest)
	b, _ := os.ReadFile(p)
	b[len(b)/2] ^= 1
	must(t, os.Chmod(p, 0o644))
	must(t, os.WriteFile(p, b, 0o644))
	rc, err = r.Blob(ctx, m.Layers[2])
	must(t, err)
	if _, err := io.ReadAll(rc); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("tampered blob: %v", err)
	}
	rc.Close()
	must(t, os.WriteFile(p, b[:10], 0o644))
	if _, err := r.Blob(ctx, m.Layers[2]); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("truncated blob: %v", err)
	}
	if ok, _ := r.HasBlob(ctx, m.Layers[2]); ok {
		t.Error("HasBlob true for a truncated blob")
	}
	// Pushing again repairs it.
	if _, st, err := Push(ctx, r, a, "base-k"); err != nil || st.Uploaded != 1 {
		t.Errorf("repairing push: %+v, %v", st, err)
	}
	if _, err := r.Blob(ctx, v1.Descriptor{Digest: digest.Digest("sha256:" + strings.Repeat("1", 64)), Size: 1}); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing blob: %v", err)
	}
}

func TestLayoutRepoRefusesForeignDir(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644))
	ref, err := ParseRef("oci:" + dir)
	must(t, err)
	if _, err := Open(context.Background(), ref, Options{}); !errors.Is(err, oci.ErrInvalidLayout) {
		t.Errorf("Open of a non-layout directory: %v", err)
	}
}

func TestCopyLayoutRemoteLayout(t *testing.T) {
	ctx := context.Background()
	src := openLayout(t, filepath.Join(t.TempDir(), "src"))
	a := artifact("k", layers(t, 3, "c")...)
	desc, _, err := Push(ctx, src, a, "base-k")
	must(t, err)

	s := newServer(t, false)
	remote := openRepo(t, s, "team/pylayer", quick())
	got, st, err := Copy(ctx, src, remote, desc, "base-k")
	must(t, err)
	if got.Digest != desc.Digest || st.Uploaded != 4 {
		t.Errorf("copy to remote: %+v %+v", got, st)
	}
	if _, st, err = Copy(ctx, src, remote, desc, "base-k"); err != nil || st.Uploaded != 0 {
		t.Errorf("second copy: %+v, %v", st, err)
	}

	back := openLayout(t, filepath.Join(t.TempDir(), "back"))
	rd, err := remote.Resolve(ctx, "base-k")
	must(t, err)
	got, _, err = Copy(ctx, remote, back, rd, "base-k")
	must(t, err)
	ref, _ := ParseRef(back.Name() + ":base-k")
	d, raw, err := ResolveRef(ctx, back, ref)
	must(t, err)
	if got.Digest != desc.Digest || d.Digest != desc.Digest || d.Size != int64(len(raw)) {
		t.Errorf("round trip: %s, %s, want %s", got.Digest, d.Digest, desc.Digest)
	}
}
