package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
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
	if err := createOnce(l.Dir, layoutFile, marker); err != nil {
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
	if err := createOnce(l.Dir, indexFile, empty); err != nil {
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
// copying, fsyncs, and renames into place; nothing is visible under the
// digest unless it verified. When a blob of that digest and size is already
// present it returns nil without reading r. Mismatches wrap ErrSizeMismatch
// or ErrDigestMismatch.
func (l *Layout) WriteBlob(ctx context.Context, r io.Reader, expected v1.Descriptor) (err error) {
	if err := checkDescriptor(expected); err != nil {
		return fmt.Errorf("writing blob: %w", err)
	}
	if size, ok := l.blobSize(expected.Digest); ok && size == expected.Size {
		return nil
	}
	dst := l.BlobPath(expected.Digest)
	tmp, err := os.CreateTemp(filepath.Join(l.Dir, "blobs"), tmpPrefix+"blob-*")
	if err != nil {
		return fmt.Errorf("writing blob %s: %w", expected.Digest, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(ctxReader{ctx, r}, expected.Size+1))
	if err != nil {
		return fmt.Errorf("writing blob %s: %w", expected.Digest, err)
	}
	if n != expected.Size {
		return fmt.Errorf("writing blob %s: %w: got %s bytes, want %d", expected.Digest, ErrSizeMismatch, atLeast(n, expected.Size), expected.Size)
	}
	if got := sumDigest(h); got != expected.Digest {
		return fmt.Errorf("writing blob %s: %w: content hashes to %s", expected.Digest, ErrDigestMismatch, got)
	}
	if err := syncClose(tmp, 0o644); err != nil {
		return fmt.Errorf("writing blob %s: %w", expected.Digest, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("writing blob %s: %w", expected.Digest, err)
	}
	return syncDir(filepath.Dir(dst))
}

// atLeast renders n, noting when the reader had more than limit bytes.
func atLeast(n, limit int64) string {
	if n > limit {
		return fmt.Sprintf("more than %d", limit)
	}
	return fmt.Sprint(n)
}

// OpenBlob opens the blob described by desc for reading. The size is checked
// on open; the digest is checked as the reader reaches the end, and Read
// returns an error wrapping ErrDigestMismatch instead of io.EOF if it does
// not match. A missing blob wraps ErrNotFound.
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
	return &verifyReader{ctx: ctx, f: f, want: desc, h: sha256.New()}, nil
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

type verifyReader struct {
	ctx  context.Context
	f    *os.File
	want v1.Descriptor
	h    hash.Hash
	n    int64
}

func (v *verifyReader) Read(p []byte) (int, error) {
	if err := v.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := v.f.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.want.Size {
		return n, fmt.Errorf("blob %s: %w: more than %d bytes", v.want.Digest, ErrSizeMismatch, v.want.Size)
	}
	if err == io.EOF {
		if v.n != v.want.Size {
			return n, fmt.Errorf("blob %s: %w: %d bytes, want %d", v.want.Digest, ErrSizeMismatch, v.n, v.want.Size)
		}
		if got := sumDigest(v.h); got != v.want.Digest {
			return n, fmt.Errorf("blob %s: %w: content hashes to %s (the blob was modified)", v.want.Digest, ErrDigestMismatch, got)
		}
	}
	return n, err
}

func (v *verifyReader) Close() error { return v.f.Close() }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// createOnce creates dir/name with content unless it exists, without ever
// exposing a partial file or replacing one another process created first.
func createOnce(dir, name string, content []byte) error {
	dst := filepath.Join(dir, name)
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	tmp, err := os.CreateTemp(dir, tmpPrefix+name+"-*")
	if err != nil {
		return fmt.Errorf("creating %s in %q: %w", name, dir, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return fmt.Errorf("creating %s in %q: %w", name, dir, err)
	}
	if err := syncClose(tmp, 0o644); err != nil {
		return fmt.Errorf("creating %s in %q: %w", name, dir, err)
	}
	// Link fails if dst exists, so a concurrent creator's file is never replaced.
	if err := os.Link(tmp.Name(), dst); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating %s in %q: %w", name, dir, err)
	}
	return syncDir(dir)
}

// writeAtomic replaces dir/name with content: temp file, fsync, rename, fsync dir.
func writeAtomic(dir, name string, content []byte) error {
	tmp, err := os.CreateTemp(dir, tmpPrefix+name+"-*")
	if err != nil {
		return fmt.Errorf("writing %s in %q: %w", name, dir, err)
	}
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s in %q: %w", name, dir, err)
	}
	if err := syncClose(tmp, 0o644); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s in %q: %w", name, dir, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s in %q: %w", name, dir, err)
	}
	return syncDir(dir)
}

func syncClose(f *os.File, mode os.FileMode) error {
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing directory %q: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %q: %w", dir, err)
	}
	return nil
}
