package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

const (
	layoutFile = v1.ImageLayoutFile // "oci-layout"
	indexFile  = "index.json"
	lockFile   = ".index.json.lock"
	tmpPrefix  = ".tmp-" // temporary files in blobs/ and the layout root
)

// Layout is an OCI image layout directory: oci-layout, index.json and
// blobs/sha256/<hex>. Its methods are safe for concurrent use by goroutines
// and processes: blobs are written to temporary files and renamed into place,
// and index.json is rewritten atomically under a lock file.
type Layout struct{ Dir string }

// OpenLayout opens the OCI image layout at dir, creating the directory, the
// oci-layout file ({"imageLayoutVersion":"1.0.0"}), an empty index.json and
// blobs/sha256 if they are missing. An existing oci-layout or index.json that
// is not valid is an error wrapping ErrInvalidLayout.
func OpenLayout(dir string) (*Layout, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: empty directory name", ErrInvalidLayout)
	}
	l := &Layout{Dir: filepath.Clean(dir)}
	if err := os.MkdirAll(filepath.Join(l.Dir, "blobs", string(digest.SHA256)), 0o755); err != nil {
		return nil, fmt.Errorf("creating OCI layout %q: %w", dir, err)
	}
	// Compact JSON, as go-containerregistry and oras write it.
	marker, _ := json.Marshal(v1.ImageLayout{Version: v1.ImageLayoutVersion})
	if err := createOnce(context.Background(), l.Dir, layoutFile, marker); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(l.Dir, layoutFile))
	if err != nil {
		return nil, fmt.Errorf("reading %s of OCI layout %q: %w", layoutFile, dir, err)
	}
	var il v1.ImageLayout
	if err := json.Unmarshal(b, &il); err != nil {
		return nil, fmt.Errorf("%w: %q: %s: %v", ErrInvalidLayout, dir, layoutFile, err)
	}
	if il.Version != v1.ImageLayoutVersion {
		return nil, fmt.Errorf("%w: %q: imageLayoutVersion is %q, only %q is supported", ErrInvalidLayout, dir, il.Version, v1.ImageLayoutVersion)
	}
	empty, err := marshalIndex(nil)
	if err != nil {
		return nil, err
	}
	if err := createOnce(context.Background(), l.Dir, indexFile, empty); err != nil {
		return nil, err
	}
	if _, err := l.readIndex(); err != nil {
		return nil, err
	}
	return l, nil
}

// BlobPath is the path of the blob with digest d. It returns "" when d is not
// a valid sha256 digest, so a hostile digest can never name a path outside
// blobs/.
func (l *Layout) BlobPath(d digest.Digest) string {
	if checkDigest(d) != nil {
		return ""
	}
	return filepath.Join(l.Dir, "blobs", string(d.Algorithm()), d.Encoded())
}

// HasBlob reports whether the layout holds a regular file for digest d. It
// does not verify the content; OpenBlob and Manifest do.
func (l *Layout) HasBlob(d digest.Digest) bool {
	_, ok := l.blobSize(d)
	return ok
}

func (l *Layout) blobSize(d digest.Digest) (int64, bool) {
	p := l.BlobPath(d)
	if p == "" {
		return 0, false
	}
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return 0, false
	}
	return fi.Size(), true
}

// WriteBlob stores the content of r as the blob described by expected. It
// writes to a temporary file in blobs/, verifies size and digest while
// copying (VerifyReader), fsyncs, and renames into place; nothing is visible
// under the digest unless it verified. When a blob of that digest and size is
// already present it returns nil without reading r. Mismatches wrap
// ErrSizeMismatch or ErrDigestMismatch.
func (l *Layout) WriteBlob(ctx context.Context, r io.Reader, expected v1.Descriptor) error {
	if err := checkDescriptor(expected); err != nil {
		return fmt.Errorf("writing blob: %w", err)
	}
	if size, ok := l.blobSize(expected.Digest); ok && size == expected.Size {
		return nil
	}
	w, err := fsx.CreateIn(ctx, filepath.Join(l.Dir, "blobs"), l.BlobPath(expected.Digest), 0o644)
	if err != nil {
		return fmt.Errorf("writing blob %s: %w", expected.Digest, err)
	}
	defer w.Cleanup()
	if _, err := io.Copy(w, NewVerifyReader(fsx.Reader(ctx, r), expected)); err != nil {
		return fmt.Errorf("writing blob %s: %w", expected.Digest, err)
	}
	return w.Commit(ctx)
}

// OpenBlob opens the blob described by desc for reading. The size is checked
// on open; size and digest are checked as the reader streams (VerifyReader),
// and Read returns an error wrapping ErrDigestMismatch instead of io.EOF if the
// content does not match. A missing blob wraps ErrNotFound.
func (l *Layout) OpenBlob(ctx context.Context, desc v1.Descriptor) (io.ReadCloser, error) {
	if err := checkDescriptor(desc); err != nil {
		return nil, fmt.Errorf("opening blob: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(l.BlobPath(desc.Digest))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("blob %s: %w in layout %q", desc.Digest, ErrNotFound, l.Dir)
	}
	if err != nil {
		return nil, fmt.Errorf("opening blob %s: %w", desc.Digest, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening blob %s: %w", desc.Digest, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() != desc.Size {
		f.Close()
		return nil, fmt.Errorf("blob %s in layout %q: %w: file has %d bytes, descriptor says %d", desc.Digest, l.Dir, ErrSizeMismatch, fi.Size(), desc.Size)
	}
	return NewVerifyReader(fsx.ReadCloser(ctx, f), desc), nil
}

// readBlob reads a whole blob of at most limit bytes and verifies its digest.
func (l *Layout) readBlob(ctx context.Context, d digest.Digest, limit int64) ([]byte, error) {
	if err := checkDigest(d); err != nil {
		return nil, err
	}
	size, ok := l.blobSize(d)
	if !ok {
		return nil, fmt.Errorf("blob %s: %w in layout %q", d, ErrNotFound, l.Dir)
	}
	if size > limit {
		return nil, fmt.Errorf("blob %s in layout %q is %d bytes, more than the %d allowed", d, l.Dir, size, limit)
	}
	rc, err := l.OpenBlob(ctx, v1.Descriptor{Digest: d, Size: size})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, rc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// createOnce creates dir/name with content unless it exists, without ever
// exposing a partial file or replacing one another process created first.
func createOnce(ctx context.Context, dir, name string, content []byte) error {
	if _, err := fsx.CreateFile(ctx, filepath.Join(dir, name), content, 0o644); err != nil {
		return fmt.Errorf("creating %s in %q: %w", name, dir, err)
	}
	return nil
}

// writeAtomic replaces dir/name with content: temp file, fsync, rename, fsync dir.
func writeAtomic(ctx context.Context, dir, name string, content []byte) error {
	if err := fsx.WriteFile(ctx, filepath.Join(dir, name), content, 0o644); err != nil {
		return fmt.Errorf("writing %s in %q: %w", name, dir, err)
	}
	return nil
}
