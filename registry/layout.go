package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/oci"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// layoutRepo is an OCI image layout directory (oci.Layout). The directory is created by the
// first push, not by Open, so that reading a mistyped path creates nothing.
type layoutRepo struct {
	dir   string
	note  *notifier
	jobsN int

	mu sync.Mutex
	l  *oci.Layout // nil until the layout exists
}

var _ Repo = (*layoutRepo)(nil)

func openLayoutRepo(ref Ref, o Options) (*layoutRepo, error) {
	r := &layoutRepo{dir: ref.Layout, jobsN: o.Jobs, note: &notifier{fn: o.Progress, repo: ref.Name()}}
	switch _, err := os.Stat(filepath.Join(r.dir, v1.ImageLayoutFile)); {
	case err == nil:
		if r.l, err = oci.OpenLayout(r.dir); err != nil {
			return nil, err
		}
	case errors.Is(err, fs.ErrNotExist):
		entries, err := os.ReadDir(r.dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", r.Name(), err)
		}
		if len(entries) > 0 {
			return nil, fmt.Errorf("%s: %w: the directory exists, is not empty and has no %s file; name a new or empty directory", r.Name(), oci.ErrInvalidLayout, v1.ImageLayoutFile)
		}
	default:
		return nil, fmt.Errorf("%s: %w", r.Name(), err)
	}
	return r, nil
}

func (r *layoutRepo) Name() string { return LayoutPrefix + r.dir }

// layout returns the layout, creating it when create is set. Without create, a layout that
// does not exist (yet) is an error wrapping ErrNotFound.
func (r *layoutRepo) layout(create bool) (*oci.Layout, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.l != nil {
		return r.l, nil
	}
	if !create {
		if _, err := os.Stat(filepath.Join(r.dir, v1.ImageLayoutFile)); err != nil {
			return nil, fmt.Errorf("%s: no OCI image layout there: %w", r.Name(), ErrNotFound)
		}
	}
	l, err := oci.OpenLayout(r.dir)
	if err != nil {
		return nil, err
	}
	r.l = l
	return l, nil
}

func (r *layoutRepo) Resolve(ctx context.Context, tag string) (v1.Descriptor, error) {
	l, err := r.layout(false)
	if err != nil {
		return v1.Descriptor{}, err
	}
	d, err := l.Resolve(ctx, tag)
	if err != nil {
		if errors.Is(err, oci.ErrNotFound) {
			return v1.Descriptor{}, fmt.Errorf("%s: tag %s: %w", r.Name(), tag, ErrNotFound)
		}
		return v1.Descriptor{}, fmt.Errorf("%s: %w", r.Name(), err)
	}
	delete(d.Annotations, v1.AnnotationRefName)
	if len(d.Annotations) == 0 {
		d.Annotations = nil
	}
	return d, nil
}

// open opens blob d, checking that the file is regular; size < 0 skips the size check.
func (r *layoutRepo) open(d v1.Descriptor, what string) (*os.File, int64, error) {
	if err := checkDesc(d); err != nil {
		return nil, 0, fmt.Errorf("%s: %s: %w", r.Name(), what, err)
	}
	l, err := r.layout(false)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(l.BlobPath(d.Digest))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("%s: %s %s: %w", r.Name(), what, d.Digest, ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", r.Name(), err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s %s is not a regular file", what, d.Digest)
	}
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w", r.Name(), err)
	}
	return f, fi.Size(), nil
}

func (r *layoutRepo) Manifest(ctx context.Context, d v1.Descriptor) ([]byte, error) {
	f, size, err := r.open(d, "manifest")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > maxManifest {
		return nil, fmt.Errorf("%s: manifest %s is %d bytes, more than the %d allowed", r.Name(), d.Digest, size, maxManifest)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading manifest %s: %w", r.Name(), d.Digest, err)
	}
	if err := checkBytes(b, d, "manifest"); err != nil {
		return nil, fmt.Errorf("%s: %w", r.Name(), err)
	}
	return b, nil
}

func (r *layoutRepo) Blob(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
	f, size, err := r.open(d, "blob")
	if err != nil {
		return nil, err
	}
	if size != d.Size {
		f.Close()
		return nil, fmt.Errorf("%s: blob %s: %w: the file has %d bytes, its descriptor states %d", r.Name(), d.Digest, ErrSizeMismatch, size, d.Size)
	}
	return newVerifiedBlob(fsx.ReadCloser(ctx, f), d), nil
}

func (r *layoutRepo) HasBlob(ctx context.Context, d v1.Descriptor) (bool, error) {
	if err := checkDesc(d); err != nil {
		return false, fmt.Errorf("%s: blob: %w", r.Name(), err)
	}
	l, err := r.layout(false)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	fi, err := os.Lstat(l.BlobPath(d.Digest))
	return err == nil && fi.Mode().IsRegular() && fi.Size() == d.Size, nil
}

func (r *layoutRepo) PushBlob(ctx context.Context, d v1.Descriptor, open func() (io.ReadCloser, error)) (bool, error) {
	if ok, err := r.HasBlob(ctx, d); err != nil || ok {
		if ok {
			r.note.emit(Event{Kind: BlobExists, Digest: d.Digest, Size: d.Size})
		}
		return false, err
	}
	l, err := r.layout(true)
	if err != nil {
		return false, err
	}
	r.note.emit(Event{Kind: BlobUploading, Digest: d.Digest, Size: d.Size, Attempt: 1})
	rc, err := open()
	if err != nil {
		return false, fmt.Errorf("%s: opening blob %s to copy: %w", r.Name(), d.Digest, err)
	}
	defer rc.Close()
	if err := l.WriteBlob(ctx, rc, d); err != nil {
		return false, fmt.Errorf("%s: %w", r.Name(), err)
	}
	r.note.emit(Event{Kind: BlobUploaded, Digest: d.Digest, Size: d.Size})
	return true, nil
}

// PushManifest writes the manifest blob, then (with a tag) points index.json at it. Like a
// registry, it refuses an image manifest whose config or layers are missing, and an image
// index whose manifests are.
func (r *layoutRepo) PushManifest(ctx context.Context, raw []byte, mediaType, tag string) (v1.Descriptor, error) {
	desc, err := manifestDesc(raw, mediaType, tag)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s: pushing manifest: %w", r.Name(), err)
	}
	if mediaType == v1.MediaTypeImageManifest {
		m, err := oci.ParseManifest(raw)
		if err != nil {
			return v1.Descriptor{}, fmt.Errorf("%s: pushing manifest: %w", r.Name(), err)
		}
		for _, b := range append([]v1.Descriptor{m.Config}, m.Layers...) {
			if ok, err := r.HasBlob(ctx, b); err != nil || !ok {
				return v1.Descriptor{}, fmt.Errorf("%s: pushing manifest %s: it references blob %s, which the layout lacks (%w): push the blobs first", r.Name(), desc.Digest, b.Digest, ErrNotFound)
			}
		}
	}
	if oci.IsIndex(mediaType) {
		idx, err := oci.ParseIndex(raw)
		if err != nil {
			return v1.Descriptor{}, fmt.Errorf("%s: pushing image index: %w", r.Name(), err)
		}
		for _, m := range idx.Manifests {
			if ok, err := r.HasBlob(ctx, m); err != nil || !ok {
				return v1.Descriptor{}, fmt.Errorf("%s: pushing image index %s: it references manifest %s, which the layout lacks (%w): push the manifests first", r.Name(), desc.Digest, m.Digest, ErrNotFound)
			}
		}
	}
	l, err := r.layout(true)
	if err != nil {
		return v1.Descriptor{}, err
	}
	if err := l.WriteBlob(ctx, bytes.NewReader(raw), desc); err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s: %w", r.Name(), err)
	}
	if tag != "" {
		if err := l.Tag(ctx, desc, tag); err != nil {
			return v1.Descriptor{}, fmt.Errorf("%s: tagging %s: %w", r.Name(), tag, err)
		}
	}
	r.note.emit(Event{Kind: ManifestPushed, Digest: desc.Digest, Size: desc.Size, Tag: tag})
	return desc, nil
}
