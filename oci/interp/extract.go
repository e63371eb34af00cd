package interp

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/pylayer/pylayer/oci"
)

// ErrUnsafeTarball: an interpreter tarball holds something Artifact refuses to
// unpack (a path leaving the tree, a link out of it, a device, a setuid bit,
// a duplicate ...), is not python-build-standalone's install_only layout, is
// not a readable gzip'd tar, or exceeds Limits. The error names the entry.
var ErrUnsafeTarball = errors.New("unsafe interpreter tarball")

// TopDir is the one top-level directory of an install_only tarball.
const TopDir = "python"

// Limits bound what a tarball may unpack to, counted on the bytes read.
type Limits struct {
	MaxEntries    int
	MaxFileBytes  int64
	MaxTotalBytes int64
}

// DefaultLimits: 200k entries, 1 GiB per file, 4 GiB in all (a CPython
// install_only tree is about 20k entries and 200 MiB).
func DefaultLimits() Limits {
	return Limits{MaxEntries: 200_000, MaxFileBytes: 1 << 30, MaxTotalBytes: 4 << 30}
}

func unsafeEntry(name, format string, args ...any) error {
	return fmt.Errorf("%w: entry %q: %s", ErrUnsafeTarball, name, fmt.Sprintf(format, args...))
}

// extract unpacks the gzip'd tar r, whose entries must all lie under TopDir/,
// into dst (which it creates and must not exist) with TopDir/ stripped.
// Regular files get mode 0755 or 0644, directories 0755; symlinks must pass
// oci.CheckSymlink; a hardlink must name a regular file extracted before it.
// Nothing is ever written through a symlink. On error dst is removed.
func extract(ctx context.Context, r io.Reader, dst string, lim Limits) (err error) {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return fmt.Errorf("creating the prefix directory: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dst)
		}
	}()
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("%w: not a gzip stream: %v", ErrUnsafeTarball, err)
	}
	defer zr.Close()
	x := &extractor{root: root, lim: lim, kind: map[string]byte{}}
	tr := tar.NewReader(zr)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: reading the tar after %d entries: %v", ErrUnsafeTarball, x.entries, err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return err
		}
	}
	if x.kind["bin"] != tar.TypeDir {
		return fmt.Errorf("%w: no %s/bin/: not a python-build-standalone install_only tarball", ErrUnsafeTarball, TopDir)
	}
	return nil
}

type extractor struct {
	root    *os.Root
	lim     Limits
	kind    map[string]byte // tar type of every path made, implied parents as TypeDir
	entries int
	total   int64
}

// stripName validates a tar name and returns it relative to TopDir ("" for TopDir itself).
func stripName(raw string) (string, error) {
	name := strings.TrimSuffix(raw, "/")
	switch {
	case !utf8.ValidString(name):
		return "", errors.New("name is not valid UTF-8")
	case strings.ContainsAny(name, "\x00\\"):
		return "", errors.New("name contains NUL or a backslash")
	case strings.HasPrefix(name, "/"):
		return "", errors.New("absolute path")
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", errors.New(`path contains ".."`)
		}
	}
	if name == "" || path.Clean(name) != name {
		return "", fmt.Errorf("path is not clean (it cleans to %q)", path.Clean(name))
	}
	if name == TopDir {
		return "", nil
	}
	rel, ok := strings.CutPrefix(name, TopDir+"/")
	if !ok {
		return "", fmt.Errorf("outside %s/: not a python-build-standalone install_only tarball", TopDir)
	}
	return rel, nil
}

func (x *extractor) entry(hdr *tar.Header, tr io.Reader) error {
	raw := hdr.Name
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil // global PAX records carry no file
	}
	x.entries++
	if x.entries > x.lim.MaxEntries {
		return unsafeEntry(raw, "more than %d entries", x.lim.MaxEntries)
	}
	name, err := stripName(raw)
	if err != nil {
		return unsafeEntry(raw, "%v", err)
	}
	if hdr.Mode&0o7000 != 0 {
		return unsafeEntry(raw, "mode %#o has setuid, setgid or sticky bits", hdr.Mode)
	}
	if name == "" {
		if hdr.Typeflag != tar.TypeDir {
			return unsafeEntry(raw, "%s must be a directory", TopDir)
		}
		return nil
	}
	if _, seen := x.kind[name]; seen {
		if hdr.Typeflag == tar.TypeDir && x.kind[name] == tar.TypeDir {
			return nil // a directory implied earlier, or listed twice
		}
		return unsafeEntry(raw, "duplicate entry")
	}
	if err := x.parents(raw, name); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.mkdir(raw, name)
	case tar.TypeReg:
		return x.file(hdr, tr, name)
	case tar.TypeSymlink:
		if err := oci.CheckSymlink(name, hdr.Linkname); err != nil {
			return unsafeEntry(raw, "%v", err)
		}
		if err := x.root.Symlink(hdr.Linkname, name); err != nil {
			return fmt.Errorf("unpacking %q: %w", raw, err)
		}
		x.kind[name] = tar.TypeSymlink
		return nil
	case tar.TypeLink:
		old, err := stripName(hdr.Linkname)
		if err != nil || old == "" {
			return unsafeEntry(raw, "hardlink to %q: %v", hdr.Linkname, err)
		}
		if x.kind[old] != tar.TypeReg {
			return unsafeEntry(raw, "hardlink to %q, which is not a regular file unpacked before it", hdr.Linkname)
		}
		if err := x.root.Link(old, name); err != nil {
			return fmt.Errorf("unpacking %q: %w", raw, err)
		}
		x.kind[name] = tar.TypeReg
		return nil
	default:
		return unsafeEntry(raw, "tar entry type %q: a prefix holds files, directories and symlinks only", hdr.Typeflag)
	}
}

// parents creates the directories above name that no entry made yet, and
// refuses a parent that is a file or a symlink.
func (x *extractor) parents(raw, name string) error {
	for i := 0; i < len(name); i++ {
		if name[i] != '/' {
			continue
		}
		p := name[:i]
		k, seen := x.kind[p]
		switch {
		case !seen:
			if err := x.mkdir(raw, p); err != nil {
				return err
			}
		case k != tar.TypeDir:
			return unsafeEntry(raw, "parent %q is not a directory", p)
		}
	}
	return nil
}

func (x *extractor) mkdir(raw, name string) error {
	if err := x.root.Mkdir(name, 0o755); err != nil {
		return fmt.Errorf("unpacking %q: %w", raw, err)
	}
	x.kind[name] = tar.TypeDir
	return nil
}

func (x *extractor) file(hdr *tar.Header, tr io.Reader, name string) error {
	raw := hdr.Name
	if hdr.Size > x.lim.MaxFileBytes {
		return unsafeEntry(raw, "%d bytes, the limit per file is %d", hdr.Size, x.lim.MaxFileBytes)
	}
	if hdr.Size > x.lim.MaxTotalBytes-x.total {
		return unsafeEntry(raw, "unpacking it would exceed the limit of %d bytes", x.lim.MaxTotalBytes)
	}
	mode := os.FileMode(0o644)
	if hdr.Mode&0o111 != 0 {
		mode = 0o755
	}
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("unpacking %q: %w", raw, err)
	}
	n, err := io.CopyN(f, tr, hdr.Size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: entry %q: reading its content (%d of %d bytes): %v", ErrUnsafeTarball, raw, n, hdr.Size, err)
	}
	if err := x.root.Chmod(name, mode); err != nil { // the umask may have narrowed it
		return fmt.Errorf("unpacking %q: %w", raw, err)
	}
	x.total += n
	x.kind[name] = tar.TypeReg
	return nil
}
