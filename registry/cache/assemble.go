package cache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/pylayer/pylayer/oci"
)

// Files of a layer root's metadata directory.
const (
	metaManifest = "manifest.json" // the manifest bytes, exactly as verified
	metaLock     = "lock.json"     // the config blob: the lock
)

// layerBuild is the root of layer md being built in tmp/layer-<hex>-*: a
// directory for every directory of every tree, a hardlink for every file. Each
// tree is added (add) as soon as it is unpacked, while others still are, so
// linking costs no pass of its own at the end; finish adds the metadata files,
// makes everything read-only and durable, and renames it into layers/sha256.
// Two blobs providing the same path are an error (ErrConflict) naming both,
// unless both provide it as a directory.
type layerBuild struct {
	c      *Cache
	md     digest.Digest
	m      *v1.Manifest
	work   string
	mu     sync.Mutex
	owners map[string]owner
	dirs   []string // made, relative to work

	// The install's per-blob work, which lives as long as the layer being built:
	// slots for its CPU-bound part (unpacking and linking a tree), one per core, each
	// with the storage a blob is inflated into while it holds the slot
	// (untar.ExtractBytes: one gzip member, oci.GzipMember, for the blobs pylayer
	// writes; up to 128 MiB for a blob of one large member), and the buffers
	// its blobs are fetched into.
	cpu     chan *[]byte
	buffers *buffers
}

// slot waits for one of the install's CPU slots and returns its inflate storage,
// which is the caller's until release frees the slot. Fetching
// needs no slot: an install fetches up to c.parallel blobs at once (twice the
// cores), and with one slot per core, the workers beyond those unpacking fetch
// the next blobs instead of crowding the cores with more unpacks and no fetch
// under way when they end. Measured on the 2-core bench pull, which is bound by
// CPU (the registry's and the page cache's writeback included): its CPU time
// (~620-650 ms) and wall time did not change beyond the machine's noise; the
// unpacks only stopped time-slicing with each other.
func (b *layerBuild) slot(ctx context.Context) (scratch *[]byte, release func(), err error) {
	select {
	case scratch = <-b.cpu:
		return scratch, func() { b.cpu <- scratch }, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// owner is the blob (by manifest index) that provides a path.
type owner struct {
	blob int
	dir  bool
}

func (c *Cache) newLayerBuild(md digest.Digest, m *v1.Manifest) (*layerBuild, error) {
	work, err := os.MkdirTemp(c.tmpDir(), "layer-"+md.Encoded()+"-*")
	if err != nil {
		return nil, fmt.Errorf("creating work directory: %w", err)
	}
	if err := os.Chmod(work, 0o755); err != nil {
		os.Remove(work)
		return nil, err
	}
	cpu := make(chan *[]byte, max(1, min(runtime.GOMAXPROCS(0), c.parallel)))
	for range cap(cpu) {
		cpu <- new([]byte)
	}
	return &layerBuild{c: c, md: md, m: m, work: work, owners: map[string]owner{},
		cpu: cpu, buffers: newBuffers(c.parallel)}, nil
}

// abort removes the work directory unless finish moved it into place.
func (b *layerBuild) abort() {
	if b.work != "" {
		forceRemoveAll(b.work)
	}
}

// add links the tree of blob i, unpacked at dir, into the layer: recs is its
// file list, or nil to read it from the cache. Safe for concurrent use; the
// paths are claimed (and directories made) under a lock, the files linked
// outside it.
func (b *layerBuild) add(ctx context.Context, i int, dir string, recs []record) error {
	l := b.m.Layers[i]
	if recs == nil {
		var err error
		if recs, err = b.c.readFiles(l.Digest.Encoded()); err != nil {
			return fmt.Errorf("%w: run `pylayer doctor --repair`", err)
		}
	}
	files, err := b.claim(i, recs)
	if err != nil {
		return err
	}
	ln := newLinker(dir, b.work)
	defer ln.close()
	for k, p := range files {
		if k%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := ln.link(p); err != nil {
			return fmt.Errorf("assembling %q from %s: %w (is the tree damaged? run `pylayer doctor --repair`)", p, titleOf(l), err)
		}
	}
	return nil
}

// claim records blob i as the owner of its paths, makes the directories no
// other blob made yet, and returns the paths to link.
func (b *layerBuild) claim(i int, recs []record) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	files := make([]string, 0, len(recs))
	for _, r := range recs {
		if r.Link != "" && b.m.ArtifactType != oci.ArtifactTypePython {
			// Trees are shared by blob digest: one unpacked for an interpreter
			// must not bring its links into a package layer.
			return nil, fmt.Errorf("%w: %q in %s is a symlink: package layers hold regular files and directories only", ErrUnsafeArchive, r.Path, titleOf(b.m.Layers[i]))
		}
		if prev, seen := b.owners[r.Path]; seen {
			if prev.dir && r.Dir {
				continue
			}
			first, second := b.m.Layers[min(prev.blob, i)], b.m.Layers[max(prev.blob, i)]
			return nil, fmt.Errorf("%w: %q is provided by both %q and %q", ErrConflict, r.Path, titleOf(first), titleOf(second))
		}
		b.owners[r.Path] = owner{blob: i, dir: r.Dir}
		if !r.Dir {
			files = append(files, r.Path)
			continue
		}
		if err := os.Mkdir(filepath.Join(b.work, filepath.FromSlash(r.Path)), 0o755); err != nil {
			return nil, fmt.Errorf("assembling %q: %w", r.Path, err)
		}
		b.dirs = append(b.dirs, r.Path)
	}
	return files, nil
}

// finish writes the metadata files, makes the layer read-only, flushes it and
// the pending trees it links to with one syncfs, then renames the trees into
// place and after them the layer, and returns its root.
func (b *layerBuild) finish(ctx context.Context, manifest, config []byte, pending []*pendingTree, emit func(Event)) (string, error) {
	c := b.c
	discard := func() {
		for _, p := range pending {
			p.discard()
		}
	}
	meta := filepath.Join(b.work, metaDir)
	if err := os.Mkdir(meta, 0o755); err != nil {
		discard()
		return "", err
	}
	for name, content := range map[string][]byte{metaManifest: manifest, metaLock: config} {
		if err := writeFileMode(filepath.Join(meta, name), content, modeFile, false); err != nil {
			discard()
			return "", fmt.Errorf("writing %s: %w", name, err)
		}
	}
	if err := sealDirs(b.work, append(b.dirs, metaDir)); err != nil {
		discard()
		return "", err
	}
	if err := c.makeDurable(ctx, pending, b.md.Encoded()); err != nil {
		discard()
		return "", err
	}
	if len(pending) > 0 {
		if err := c.placeTrees(ctx, pending, emit); err != nil {
			return "", err
		}
	}
	testHook("assembled")
	root := c.layerDir(b.md.Encoded())
	if err := moveSealed(b.work, root); err != nil {
		if _, serr := os.Lstat(root); serr == nil {
			return "", fmt.Errorf("%w: %s exists but is not a complete layer: run `pylayer doctor --repair`", ErrInvalidCache, root)
		}
		return "", fmt.Errorf("moving the layer into place: %w", err)
	}
	b.work = ""
	if c.lazy() {
		return root, nil // recorded
	}
	if err := syncDir(ctx, filepath.Dir(root)); err != nil {
		return "", err
	}
	return root, nil
}

// Hold marks layer d as in use until release is called: GC never removes a
// held layer. It takes a shared lock, so any number of sandboxes can hold a
// layer; the lock dies with the process. Hold before Install (a layer need not
// be installed to be held) so that GC cannot remove it in between.
func (c *Cache) Hold(ctx context.Context, d digest.Digest) (release func(), err error) {
	if err := checkDigest(d); err != nil {
		return nil, fmt.Errorf("holding layer: %w", err)
	}
	hex := d.Encoded()
	l, err := acquire(ctx, c.lockPath("hold", hex), lockMode{wait: true, create: true})
	if err != nil {
		return nil, fmt.Errorf("holding layer %s: %w", d, err)
	}
	c.touch(hex)
	var once sync.Once
	return func() {
		once.Do(func() {
			c.touch(hex)
			l.release()
		})
	}, nil
}
