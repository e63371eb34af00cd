package cache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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

// assemble builds the root of layer md in tmp/layer-<hex>-*: a directory for
// every directory of every tree, a hardlink for every file, the metadata
// files; then makes it read-only, fsyncs it and renames it into layers/sha256.
// Two blobs providing the same path are an error (ErrConflict) naming both,
// unless both provide it as a directory.
func (c *Cache) assemble(ctx context.Context, md digest.Digest, m *v1.Manifest, manifest, config []byte) (string, error) {
	hex := md.Encoded()
	work, err := os.MkdirTemp(c.tmpDir(), "layer-"+hex+"-*")
	if err != nil {
		return "", fmt.Errorf("creating work directory: %w", err)
	}
	done := false
	defer func() {
		if !done {
			forceRemoveAll(work)
		}
	}()
	if err := os.Chmod(work, 0o755); err != nil {
		return "", err
	}
	type owner struct {
		title string
		dir   bool
	}
	owners := map[string]owner{}
	var dirs []string
	for _, l := range m.Layers {
		th := l.Digest.Encoded()
		recs, err := c.readFiles(th)
		if err != nil {
			return "", fmt.Errorf("blob %s (%s): %w: run `pylayer doctor --repair`", l.Digest, titleOf(l), err)
		}
		title := titleOf(l)
		for i, r := range recs {
			if i%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return "", err
				}
			}
			if r.Link != "" && m.ArtifactType != oci.ArtifactTypePython {
				// Trees are shared by blob digest: one unpacked for an interpreter
				// must not bring its links into a package layer.
				return "", fmt.Errorf("%w: %q in %s is a symlink: package layers hold regular files and directories only", ErrUnsafeArchive, r.Path, title)
			}
			if prev, seen := owners[r.Path]; seen {
				if prev.dir && r.Dir {
					continue
				}
				return "", fmt.Errorf("%w: %q is provided by both %q and %q", ErrConflict, r.Path, prev.title, title)
			}
			owners[r.Path] = owner{title: title, dir: r.Dir}
			dst := filepath.Join(work, filepath.FromSlash(r.Path))
			if r.Dir {
				if err := os.Mkdir(dst, 0o755); err != nil {
					return "", fmt.Errorf("assembling %q: %w", r.Path, err)
				}
				dirs = append(dirs, r.Path)
				continue
			}
			src := filepath.Join(c.treeDir(th), filepath.FromSlash(r.Path))
			if err := os.Link(src, dst); err != nil {
				return "", fmt.Errorf("assembling %q from %s: %w (is the tree damaged? run `pylayer doctor --repair`)", r.Path, title, err)
			}
		}
	}
	meta := filepath.Join(work, metaDir)
	if err := os.Mkdir(meta, 0o755); err != nil {
		return "", err
	}
	dirs = append(dirs, metaDir)
	if err := writeReadOnly(filepath.Join(meta, metaManifest), manifest); err != nil {
		return "", fmt.Errorf("writing %s: %w", metaManifest, err)
	}
	if err := writeReadOnly(filepath.Join(meta, metaLock), config); err != nil {
		return "", fmt.Errorf("writing %s: %w", metaLock, err)
	}
	if err := seal(ctx, work, dirs); err != nil {
		return "", err
	}
	testHook("assembled")
	root := c.layerDir(hex)
	if err := moveSealed(work, root); err != nil {
		if _, serr := os.Lstat(root); serr == nil {
			return "", fmt.Errorf("%w: %s exists but is not a complete layer: run `pylayer doctor --repair`", ErrInvalidCache, root)
		}
		return "", fmt.Errorf("moving the layer into place: %w", err)
	}
	done = true
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
