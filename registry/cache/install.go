package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// Fetch opens a blob of the artifact being installed. Install checks the size
// and digest of what it reads, unless the reader is a Verifier of that very
// descriptor (registry.Repo.Blob's are).
type Fetch func(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error)

// Verifier is a blob reader that checks its content against the descriptor it
// names and returns io.EOF only once size and digest matched (it reads through
// an oci.VerifyReader of that descriptor). Install reads a Verifier of the
// descriptor it asked for to io.EOF instead of hashing the blob a second time;
// any other reader, or a Verifier of another descriptor, it verifies itself.
type Verifier interface {
	io.Reader
	VerifiesDescriptor() v1.Descriptor
}

// Event reports progress of one layer blob. Install calls the progress
// callback from one goroutine at a time.
type Event struct {
	Blob   digest.Digest
	Title  string // the wheel filename (org.opencontainers.image.title), if any
	Bytes  int64  // bytes fetched so far
	Total  int64  // the blob's size
	Done   bool   // the blob's tree is in the cache
	Cached bool   // it already was: nothing was fetched
	Queued bool   // the install will need it (one such event per blob, before any other)
}

// ErrConflict: two blobs of one layer provide the same path.
var ErrConflict = errors.New("layer blobs conflict")

// maxConfigBytes bounds the config blob (the lock); it equals lock.MaxBytes.
const maxConfigBytes = 16 << 20

// testHook is called between the steps of an install; tests use it to
// widen the windows a crash can hit.
var testHook = func(step string) {}

// Install makes the layer whose manifest has digest md available in the cache
// and returns its root. The caller must already have verified the signature
// of md; Install checks that manifest hashes to md and is a pylayer artifact.
//
// Each blob's tree is unpacked once per host: concurrent installs (of this
// or other layers sharing blobs, in this process or others) wait on a lock
// per blob and find the tree done. A layer that is already installed is
// returned without fetching anything. To keep GC from removing the layer
// before it is used, Hold it first.
func (c *Cache) Install(ctx context.Context, md digest.Digest, manifest []byte, fetch Fetch, progress func(Event)) (root string, err error) {
	m, err := c.checkManifest(md, manifest)
	if err != nil {
		return "", fmt.Errorf("installing layer %s: %w", md, err)
	}
	hex := md.Encoded()
	if root, ok := c.Layer(md); ok {
		fixTop(root)
		c.touch(hex)
		return root, nil
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("installing layer %s: %w", md, err)
		}
	}()
	gl, err := acquire(ctx, c.lockPath("gc", ""), lockMode{wait: true, create: true})
	if err != nil {
		return "", err
	}
	defer gl.release()
	// Before this install writes: a syncfs now flushes others' old writes, not its own.
	if err := c.retireUnsynced(ctx, unsyncedAge); err != nil {
		return "", err
	}
	ll, err := acquire(ctx, c.lockPath("layer", hex), lockMode{exclusive: true, wait: true, create: true})
	if err != nil {
		return "", err
	}
	defer ll.release()
	if root, ok := c.Layer(md); ok { // another process finished it while we waited
		fixTop(root)
		c.touch(hex)
		return root, nil
	}
	config, err := c.fetchConfig(ctx, m.Config, fetch)
	if err != nil {
		return "", err
	}
	var mu sync.Mutex
	emit := func(e Event) {
		if progress != nil {
			mu.Lock()
			defer mu.Unlock()
			progress(e)
		}
	}
	// Every blob first, with its size from the manifest: a display knows the whole
	// total before the first byte, instead of a total that grows as blobs start.
	for _, l := range m.Layers {
		emit(Event{Blob: l.Digest, Title: titleOf(l), Total: l.Size, Queued: true})
	}
	lb, err := c.newLayerBuild(md, m)
	if err != nil {
		return "", err
	}
	defer lb.abort()
	pending, err := c.ensureTrees(ctx, m.Layers, m.ArtifactType == oci.ArtifactTypePython, fetch, emit, lb)
	if err != nil {
		return "", err
	}
	if root, err = lb.finish(ctx, manifest, config, pending, emit); err != nil {
		return "", err
	}
	c.touch(hex)
	return root, nil
}

func (c *Cache) checkManifest(md digest.Digest, b []byte) (*v1.Manifest, error) {
	if err := checkDigest(md); err != nil {
		return nil, err
	}
	if got := digest.FromBytes(b); got != md {
		return nil, fmt.Errorf("%w: the manifest bytes hash to %s", oci.ErrDigestMismatch, got)
	}
	m, err := oci.ParseManifest(b)
	if err != nil {
		return nil, err
	}
	if m.ArtifactType != oci.ArtifactTypeLayer && m.ArtifactType != oci.ArtifactTypePython {
		return nil, fmt.Errorf("%w: artifactType %q is not a pylayer artifact (%s or %s)", oci.ErrInvalidManifest, m.ArtifactType, oci.ArtifactTypeLayer, oci.ArtifactTypePython)
	}
	if want := oci.ConfigMediaType(m.ArtifactType); m.Config.MediaType != want {
		return nil, fmt.Errorf("%w: config media type %q, want %q", oci.ErrInvalidManifest, m.Config.MediaType, want)
	}
	if m.Config.Size > maxConfigBytes {
		return nil, fmt.Errorf("%w: config (the lock) is %d bytes, the limit is %d", ErrTooLarge, m.Config.Size, maxConfigBytes)
	}
	if len(m.Layers) == 0 {
		return nil, fmt.Errorf("%w: no layer blobs", oci.ErrInvalidManifest)
	}
	seen := make(map[digest.Digest]bool, len(m.Layers))
	for i, l := range m.Layers {
		if !oci.IsLayerMediaType(l.MediaType) {
			return nil, fmt.Errorf("%w: layer %d (%s): media type %q: the host cache unpacks tar layers, plain, gzip'd or zstd-compressed, only", oci.ErrInvalidManifest, i, titleOf(l), l.MediaType)
		}
		if seen[l.Digest] {
			return nil, fmt.Errorf("%w: layer %d (%s): blob %s is listed twice", oci.ErrInvalidManifest, i, titleOf(l), l.Digest)
		}
		seen[l.Digest] = true
		if l.Size > c.limits.MaxBlobBytes {
			return nil, fmt.Errorf("%w: layer %d (%s): %d bytes, the limit is %d", ErrTooLarge, i, titleOf(l), l.Size, c.limits.MaxBlobBytes)
		}
	}
	return m, nil
}

// titleOf names a layer blob for humans: its wheel filename, else its title, else its digest.
func titleOf(l v1.Descriptor) string {
	if w := oci.LayerWheel(l); w != "" {
		return w
	}
	if t := l.Annotations[v1.AnnotationTitle]; t != "" {
		return t
	}
	return string(l.Digest)
}

func (c *Cache) fetchConfig(ctx context.Context, d v1.Descriptor, fetch Fetch) ([]byte, error) {
	rc, err := fetch(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("fetching config (the lock) %s: %w", d.Digest, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(oci.NewVerifyReader(rc, d))
	if err != nil {
		return nil, fmt.Errorf("fetching config (the lock) %s: %w", d.Digest, err)
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%w: config %s is not JSON", oci.ErrInvalidManifest, d.Digest)
	}
	return b, nil
}

// touch records that layer hex was used now (the mtime of its hold lock
// file), for GC's oldest-used-first order. Errors are ignored: the order is
// a preference, not a guarantee.
func (c *Cache) touch(hex string) {
	p := c.lockPath("hold", hex)
	now := time.Now()
	if err := os.Chtimes(p, now, now); errors.Is(err, fs.ErrNotExist) {
		if f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE, 0o644); err == nil {
			f.Close()
		}
	}
}
