package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// Files of a layer root's metadata directory.
const (
	metaManifest = "manifest.json" // the manifest bytes, exactly as verified
	metaLock     = "lock.json"     // the config blob: the lock
)

// layerBuild is the root of layer md being built in tmp/layer-<hex>-*. A blob this
// install unpacks is merged into it whole at finish: its tree's entries are renamed
// into the layer, a handful per wheel (site-packages/numpy, numpy-2.1.dist-info,
// ...), never a pass over its files, and the layer becomes the tree's home (see
// placeHomes). A blob whose tree the cache already has is linked into it as soon as
// it is found (add: a directory for every directory, a hardlink for every file),
// while the others are fetched and unpacked. finish adds the metadata files, makes
// everything read-only and durable, and renames it into layers/sha256. Two blobs
// providing the same path are an error (ErrConflict) naming both, unless both
// provide it as a directory.
type layerBuild struct {
	c      *Cache
	md     digest.Digest
	m      *v1.Manifest
	work   string
	mu     sync.Mutex
	owners map[string]owner
	made   map[string]bool // directories the layer has, relative to work

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
	return &layerBuild{c: c, md: md, m: m, work: work, owners: map[string]owner{}, made: map[string]bool{},
		cpu: cpu, buffers: newBuffers(c.parallel)}, nil
}

// abort removes the work directory unless finish moved it into place.
func (b *layerBuild) abort() {
	if b.work != "" {
		forceRemoveAll(b.work)
	}
}

// add links the tree of blob i, which the cache has at dir, into the layer: recs
// is its file list, or nil to read it from the cache.
func (b *layerBuild) add(ctx context.Context, i int, dir string, recs []record) error {
	if recs == nil {
		var err error
		if recs, err = b.c.readFiles(b.m.Layers[i].Digest.Encoded()); err != nil {
			return fmt.Errorf("%w: run `pylayer doctor --repair`", err)
		}
	}
	if err := b.claim(i, recs); err != nil {
		return err
	}
	return b.link(ctx, i, dir, recs)
}

// link gives the files of tree dir (blob i, whose paths it claimed) their names in
// the layer: it makes the directories the layer does not have yet, then hardlinks
// every file. Safe for concurrent use: directories are made under a lock, files
// linked outside it.
func (b *layerBuild) link(ctx context.Context, i int, dir string, recs []record) error {
	files := make([]string, 0, len(recs))
	b.mu.Lock()
	for _, r := range recs {
		if !r.Dir {
			files = append(files, r.Path)
			continue
		}
		if b.made[r.Path] {
			continue
		}
		if err := os.Mkdir(filepath.Join(b.work, filepath.FromSlash(r.Path)), 0o755); err != nil {
			b.mu.Unlock()
			return fmt.Errorf("assembling %q: %w", r.Path, err)
		}
		b.made[r.Path] = true
	}
	b.mu.Unlock()
	ln := newLinker(dir, b.work)
	defer ln.close()
	for k, p := range files {
		if k%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := ln.link(p); err != nil {
			return fmt.Errorf("assembling %q from %s: %w (is the tree damaged? run `pylayer doctor --repair`)", p, titleOf(b.m.Layers[i]), err)
		}
	}
	return nil
}

// claim records blob i as the owner of its paths. Safe for concurrent use.
func (b *layerBuild) claim(i int, recs []record) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range recs {
		if r.Link != "" && b.m.ArtifactType != oci.ArtifactTypePython {
			// Trees are shared by blob digest: one unpacked for an interpreter
			// must not bring its links into a package layer.
			return fmt.Errorf("%w: %q in %s is a symlink: package layers hold regular files and directories only", ErrUnsafeArchive, r.Path, titleOf(b.m.Layers[i]))
		}
		if prev, seen := b.owners[r.Path]; seen {
			if prev.dir && r.Dir {
				continue
			}
			first, second := b.m.Layers[min(prev.blob, i)], b.m.Layers[max(prev.blob, i)]
			return fmt.Errorf("%w: %q is provided by both %q and %q", ErrConflict, r.Path, titleOf(first), titleOf(second))
		}
		b.owners[r.Path] = owner{blob: i, dir: r.Dir}
	}
	return nil
}

// merge moves the tree this install unpacked for p (its paths claimed) into the
// layer: each path the layer does not have yet is renamed into it whole, with
// everything below it, and a directory the layer has already is merged into
// entry by entry. Only directories several blobs provide are descended into, so a
// wheel costs a few renames, not one per file. Not safe for concurrent use: finish
// merges one tree at a time, after every tree was unpacked or linked.
func (b *layerBuild) merge(p *pendingTree) error {
	src := filepath.Join(p.work, "tree")
	moved := map[string]bool{} // directories renamed whole: what lies below them came along
	for _, r := range p.recs {
		if movedWith(moved, r.Path) {
			if r.Dir {
				b.made[r.Path] = true
			}
			continue
		}
		if b.made[r.Path] {
			if !r.Dir { // claim refuses this; never rename over a name the layer has
				return fmt.Errorf("assembling %q: %w", r.Path, fs.ErrExist)
			}
			continue
		}
		rel := filepath.FromSlash(r.Path)
		if err := renameNoReplace(filepath.Join(src, rel), filepath.Join(b.work, rel)); err != nil {
			return fmt.Errorf("assembling %q from %s: %w", r.Path, titleOf(p.d), err)
		}
		if r.Dir {
			moved[r.Path] = true
			b.made[r.Path] = true
		}
	}
	return nil
}

// movedWith reports whether a parent directory of p is in moved. (The paths below
// a directory d need not follow d in a sorted list: d-1.0.dist-info comes between
// d and d/x.)
func movedWith(moved map[string]bool, p string) bool {
	for {
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return false
		}
		p = p[:i]
		if moved[p] {
			return true
		}
	}
}

// finish merges the trees this install unpacked into the layer, writes the
// metadata files, makes the layer read-only, flushes it with one syncfs (or records
// it, see unsynced.go), then places the pending trees' file lists, makes the layer
// their home, renames the layer into place, and returns its root.
func (b *layerBuild) finish(ctx context.Context, manifest, config []byte, pending []*pendingTree, emit func(Event)) (string, error) {
	c := b.c
	discard := func() {
		for _, p := range pending {
			p.discard()
		}
	}
	for _, p := range pending {
		if err := b.merge(p); err != nil {
			discard()
			return "", err
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
	b.made[metaDir] = true
	if err := sealDirs(b.work, slices.Collect(maps.Keys(b.made))); err != nil {
		discard()
		return "", err
	}
	if err := c.makeDurable(ctx, pending, b.md.Encoded()); err != nil {
		discard()
		return "", err
	}
	root := c.layerDir(b.md.Encoded())
	err := c.placeHomes(ctx, pending, b.md.Encoded())
	if err == nil {
		testHook("assembled")
		if err = moveSealed(b.work, root); err != nil {
			for _, p := range pending { // nothing may point at a layer that is not there
				os.Remove(c.treeDir(p.d.Digest.Encoded()))
			}
			if _, serr := os.Lstat(root); serr == nil {
				err = fmt.Errorf("%w: %s exists but is not a complete layer: run `pylayer doctor --repair`", ErrInvalidCache, root)
			} else {
				err = fmt.Errorf("moving the layer into place: %w", err)
			}
		} else {
			b.work = ""
			if !c.lazy() { // else recorded: a crash of the machine loses the renames, or they are removed
				err = errors.Join(syncDir(ctx, filepath.Dir(c.treeDir("x"))), syncDir(ctx, filepath.Dir(root)))
			}
		}
	}
	for _, p := range pending {
		p.discard() // what is left of its work is the skeleton of directories merged into others
		if err == nil {
			emit(Event{Blob: p.d.Digest, Title: titleOf(p.d), Bytes: p.d.Size, Total: p.d.Size, Done: true})
		}
	}
	if err != nil {
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
