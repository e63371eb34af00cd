package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/oci/digest"
)

// ErrNotFound: the ref (or layer) is not in the cache.
var ErrNotFound = errors.New("not found in the host cache")

// ErrInvalidCache: the cache directory is in a state the cache cannot use.
var ErrInvalidCache = errors.New("invalid host cache")

// staleAfter is how old a tmp/ entry must be before Open removes it.
const staleAfter = time.Hour

// Cache is a host cache directory. Its methods are safe for concurrent use by
// goroutines and by processes sharing the directory.
type Cache struct {
	root     string
	limits   Limits
	parallel int
	boot     string // the machine's boot (bootID), "" if unknown: see unsynced.go
}

// Option configures Open.
type Option func(*Cache) error

// WithLimits replaces the unpack limits (DefaultLimits). Zero fields keep their default.
func WithLimits(l Limits) Option {
	return func(c *Cache) error {
		if l.MaxEntries < 0 || l.MaxFileBytes < 0 || l.MaxTotalBytes < 0 || l.MaxBlobBytes < 0 {
			return fmt.Errorf("unpack limits must not be negative: %+v", l)
		}
		d := DefaultLimits()
		if l.MaxEntries == 0 {
			l.MaxEntries = d.MaxEntries
		}
		if l.MaxFileBytes == 0 {
			l.MaxFileBytes = d.MaxFileBytes
		}
		if l.MaxTotalBytes == 0 {
			l.MaxTotalBytes = d.MaxTotalBytes
		}
		if l.MaxBlobBytes == 0 {
			l.MaxBlobBytes = d.MaxBlobBytes
		}
		c.limits = l
		return nil
	}
}

// WithParallelism sets how many blobs one Install fetches and unpacks at once
// (default: twice GOMAXPROCS, at most 8: a blob being fetched waits on the
// registry and one being unpacked on the file system, so one per core leaves
// cores idle).
func WithParallelism(n int) Option {
	return func(c *Cache) error {
		if n < 1 {
			return fmt.Errorf("parallelism must be at least 1, got %d", n)
		}
		c.parallel = n
		return nil
	}
}

// Open opens the host cache at root, creating its directories (0755) if
// needed. Every directory must be a real directory (not a symlink) on one
// filesystem, so renames into place are atomic; otherwise the error wraps
// ErrInvalidCache. Entries of tmp/ older than an hour whose lock is free
// (left by a process that died) are removed.
func Open(root string, opts ...Option) (*Cache, error) {
	if root == "" {
		return nil, fmt.Errorf("%w: empty directory name", ErrInvalidCache)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("opening host cache %q: %w", root, err)
	}
	c := &Cache{root: abs, limits: DefaultLimits(), parallel: min(2*runtime.GOMAXPROCS(0), 8), boot: bootID()}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, fmt.Errorf("opening host cache %q: %w", root, err)
		}
	}
	if fi, err := os.Stat(abs); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("%w: %q is a %s, not a directory", ErrInvalidCache, abs, kindOf(fi.Mode()))
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("creating host cache %q: %w", abs, err)
	}
	top, err := os.Stat(abs) // the root itself may be reached through a symlink
	if err != nil {
		return nil, fmt.Errorf("opening host cache %q: %w", abs, err)
	}
	if !top.IsDir() {
		return nil, fmt.Errorf("%w: %q is not a directory", ErrInvalidCache, abs)
	}
	for _, rel := range []string{"trees", c.rel("trees"), "layers", c.rel("layers"), "admissions", c.rel("admissions"), "refs", "tmp", "locks", "unsynced"} {
		dir := filepath.Join(abs, rel)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("creating %q: %w", dir, err)
		}
		fi, err := os.Lstat(dir)
		if err != nil {
			return nil, fmt.Errorf("opening host cache %q: %w", abs, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("%w: %q is a %s, not a directory: move it away", ErrInvalidCache, dir, kindOf(fi.Mode()))
		}
		if !sameDevice(top, fi) {
			return nil, fmt.Errorf("%w: %q is on another filesystem than %q; every cache directory must be on one filesystem", ErrInvalidCache, dir, abs)
		}
	}
	if err := c.recoverUnsynced(context.Background()); err != nil {
		return nil, fmt.Errorf("opening host cache %q: after a crash of the machine: %w", abs, err)
	}
	c.cleanTmp(context.Background(), staleAfter)
	return c, nil
}

// Root is the absolute path of the cache directory.
func (c *Cache) Root() string { return c.root }

func (c *Cache) rel(kind string) string { return filepath.Join(kind, string(digest.SHA256)) }

func (c *Cache) treeDir(hex string) string   { return filepath.Join(c.root, "trees", "sha256", hex) }
func (c *Cache) treeFiles(hex string) string { return c.treeDir(hex) + filesSuffix }
func (c *Cache) layerDir(hex string) string  { return filepath.Join(c.root, "layers", "sha256", hex) }
func (c *Cache) tmpDir() string              { return filepath.Join(c.root, "tmp") }
func (c *Cache) lockPath(kind, hex string) string {
	if hex == "" {
		return filepath.Join(c.root, "locks", kind)
	}
	return filepath.Join(c.root, "locks", kind+"-"+hex)
}

// checkDigest accepts only sha256 digests in canonical form, so that a digest
// is always safe to use as a file name.
func checkDigest(d digest.Digest) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("digest %q: %w", string(d), err)
	}
	if d.Algorithm() != digest.SHA256 {
		return fmt.Errorf("digest %q: only sha256 digests are supported", string(d))
	}
	return nil
}

func isHex64(s string) bool { return isHex(s, 64) }

// isHex reports whether s is n lowercase hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// Layer returns the root of the installed layer d. Layer roots appear by one
// atomic rename, so a root that exists is complete.
func (c *Cache) Layer(d digest.Digest) (root string, ok bool) {
	if checkDigest(d) != nil {
		return "", false
	}
	root = c.layerDir(d.Encoded())
	if fi, err := os.Lstat(filepath.Join(root, metaDir, metaManifest)); err != nil || !fi.Mode().IsRegular() {
		return "", false
	}
	return root, true
}

// cleanTmp removes tmp/ entries older than age whose owner is gone: entries
// named tree-<hex>-* or layer-<hex>-* when that lock is free, others (files
// being replaced, directories GC renamed away) once older than staleAfter.
// Errors are ignored: a leftover only costs space, and the next Open tries again.
func (c *Cache) cleanTmp(ctx context.Context, age time.Duration) {
	entries, err := os.ReadDir(c.tmpDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue
		}
		p := filepath.Join(c.tmpDir(), e.Name())
		kind, hex, _ := strings.Cut(e.Name(), "-")
		if time.Since(info.ModTime()) < age || kind != "tree" && kind != "layer" && time.Since(info.ModTime()) < staleAfter {
			continue
		}
		if (kind == "tree" || kind == "layer") && len(hex) > 64 && isHex64(hex[:64]) {
			l, err := acquire(ctx, c.lockPath(kind, hex[:64]), lockMode{exclusive: true, create: true})
			if err != nil {
				continue // busy: its owner is still at work
			}
			forceRemoveAll(p)
			l.release()
			continue
		}
		forceRemoveAll(p)
	}
}

// forceRemoveAll removes a tree this cache made read-only: directories are
// made writable first (never files: tree files are hardlinked into layers,
// and their mode is shared). Symlinks are never followed.
func forceRemoveAll(p string) error {
	filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(path, 0o755)
		}
		return nil
	})
	return os.RemoveAll(p)
}

// durable is false only in fuzz tests, where fsync would dominate the run
// time and durability is not what is tested.
var durable = true

// fsync flushes f to disk (see durable).
func fsync(f *os.File) error {
	if !durable {
		return nil
	}
	return f.Sync()
}

// syncDir fsyncs directory dir (see durable).
func syncDir(ctx context.Context, dir string) error {
	if !durable {
		return nil
	}
	return fsx.SyncDir(ctx, dir)
}

func kindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	default:
		return "special file (" + m.Type().String() + ")"
	}
}
