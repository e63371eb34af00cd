package cache

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/klauspost/compress/gzip"

	"github.com/pylayer/pylayer/oci"
)

var (
	// ErrUnsafeArchive: a layer blob holds something the cache refuses to
	// unpack (a link, a device, a setuid bit, a path escaping the tree, a
	// duplicate entry ...) or is not a readable tar. The error names the entry.
	ErrUnsafeArchive = errors.New("unsafe layer archive")
	// ErrTooLarge: a layer blob exceeds the cache's entry-count or size limits.
	// Such errors also wrap ErrUnsafeArchive.
	ErrTooLarge = errors.New("layer archive too large")
)

// Limits bound what one layer blob may unpack to. They are enforced on the
// bytes actually read, not on what headers claim.
type Limits struct {
	MaxEntries    int   // tar entries (files and directories)
	MaxFileBytes  int64 // uncompressed bytes of one file
	MaxTotalBytes int64 // uncompressed bytes of all files of one blob
	MaxBlobBytes  int64 // compressed size of one blob (its descriptor's size)
}

// DefaultLimits: 100k entries, 1 GiB per file, 4 GiB per blob, uncompressed and compressed.
func DefaultLimits() Limits {
	return Limits{MaxEntries: 100_000, MaxFileBytes: 1 << 30, MaxTotalBytes: 4 << 30, MaxBlobBytes: 4 << 30}
}

// metaDir is the directory of a layer root that holds the cache's own
// metadata; trees may not provide it.
const metaDir = ".pylayer"

// Modes of everything the cache makes: nothing is writable, nothing special.
const (
	modeDir  = 0o555
	modeFile = 0o444
	modeExec = 0o555
	modeLink = 0o777 // symlinks, in interpreter trees only
)

func unsafeEntry(name, format string, args ...any) error {
	return fmt.Errorf("%w: entry %q: %s", ErrUnsafeArchive, name, fmt.Sprintf(format, args...))
}

func tooLarge(name, format string, args ...any) error {
	return tooLargeError(fmt.Sprintf("%s: entry %q: %s", ErrTooLarge, name, fmt.Sprintf(format, args...)))
}

// tooLargeError is both ErrTooLarge and ErrUnsafeArchive, and says it once.
type tooLargeError string

func (e tooLargeError) Error() string { return string(e) }

func (e tooLargeError) Is(target error) bool {
	return target == ErrTooLarge || target == ErrUnsafeArchive
}

// checkName validates an archive path (without a directory's trailing '/').
// The same rules apply to the paths of a .files manifest.
func checkName(name string) error {
	switch {
	case name == "", name == ".":
		return errors.New(`empty name, or "."`)
	case !utf8.ValidString(name):
		return errors.New("name is not valid UTF-8")
	case strings.ContainsRune(name, 0):
		return errors.New("name contains NUL")
	case strings.ContainsRune(name, '\\'):
		return errors.New(`name contains a backslash`)
	case strings.HasPrefix(name, "/"):
		return errors.New("absolute path")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return errors.New("name contains a control character")
		}
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return errors.New(`path contains ".."`)
		}
	}
	if path.Clean(name) != name {
		return fmt.Errorf("path is not clean (it cleans to %q)", path.Clean(name))
	}
	if first, _, _ := strings.Cut(name, "/"); first == metaDir {
		return fmt.Errorf("%s/ is reserved for the cache's metadata", metaDir)
	}
	return nil
}

// unpack reads a tar (gzip'd when compressed) from r and writes its regular
// files and directories under dst, which it creates and must not exist. It
// refuses anything else (see ErrUnsafeArchive) and returns what it wrote,
// sorted by path, with the sha256 of every file. Files are fsynced and get
// their final read-only modes; directories keep 0755 (seal makes them
// read-only). On error dst is removed.
func unpack(ctx context.Context, r io.Reader, compressed bool, dst string, lim Limits) (recs []record, err error) {
	return unpackWith(ctx, r, compressed, dst, lim, false)
}

// unpackWith is unpack that, when links is set (interpreter artifacts only),
// also accepts symlinks whose target passes oci.CheckSymlink: relative, clean,
// resolving inside the tree. Nothing is ever written through a symlink: an
// entry below one is refused like an entry below a file.
func unpackWith(ctx context.Context, r io.Reader, compressed bool, dst string, lim Limits, links bool) (recs []record, err error) {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return nil, fmt.Errorf("creating unpack directory: %w", err)
	}
	defer func() {
		if err != nil {
			forceRemoveAll(dst)
		}
	}()
	root, err := os.OpenRoot(dst)
	if err != nil {
		return nil, fmt.Errorf("opening unpack directory: %w", err)
	}
	defer root.Close()

	src := r
	if compressed {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%w: not a gzip stream: %v", ErrUnsafeArchive, err)
		}
		defer zr.Close()
		src = zr
	}
	u := &unpacker{root: root, lim: lim, links: links, isDir: map[string]bool{}, explicit: map[string]bool{}}
	tr := tar.NewReader(src)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: reading the tar after %d entries: %v", ErrUnsafeArchive, u.entries, err)
		}
		if err := u.entry(hdr, tr); err != nil {
			return nil, err
		}
	}
	if u.entries == 0 {
		return nil, fmt.Errorf("%w: the archive has no entries", ErrUnsafeArchive)
	}
	sort.Slice(u.recs, func(i, j int) bool { return u.recs[i].Path < u.recs[j].Path })
	return u.recs, nil
}

type unpacker struct {
	root     *os.Root
	lim      Limits
	links    bool            // symlinks inside the tree allowed
	isDir    map[string]bool // every path created, explicit or implied
	explicit map[string]bool // paths named by an entry
	entries  int
	total    int64
	recs     []record
}

func (u *unpacker) entry(hdr *tar.Header, tr io.Reader) error {
	u.entries++
	raw := hdr.Name
	if u.entries > u.lim.MaxEntries {
		return tooLarge(raw, "more than %d entries", u.lim.MaxEntries)
	}
	var dir, link bool
	switch hdr.Typeflag {
	case tar.TypeReg:
	case tar.TypeDir:
		dir = true
	case tar.TypeSymlink:
		if u.links {
			link = true
			break
		}
		return unsafeEntry(raw, "symlink to %q: layer trees hold regular files and directories only", hdr.Linkname)
	case tar.TypeLink:
		return unsafeEntry(raw, "hardlink to %q: layer trees hold regular files and directories only", hdr.Linkname)
	case tar.TypeChar, tar.TypeBlock:
		return unsafeEntry(raw, "device node: layer trees hold regular files and directories only")
	case tar.TypeFifo:
		return unsafeEntry(raw, "named pipe (fifo): layer trees hold regular files and directories only")
	default:
		return unsafeEntry(raw, "tar entry type %q: layer trees hold regular files and directories only", hdr.Typeflag)
	}
	name := raw
	if dir {
		name = strings.TrimSuffix(name, "/")
	}
	if err := checkName(name); err != nil {
		return unsafeEntry(raw, "%v", err)
	}
	if hdr.Mode&0o7000 != 0 {
		return unsafeEntry(raw, "mode %#o has setuid, setgid or sticky bits", hdr.Mode)
	}
	if u.explicit[name] {
		return unsafeEntry(raw, "duplicate entry")
	}
	u.explicit[name] = true
	if err := u.parents(raw, name); err != nil {
		return err
	}
	if dir {
		if isDir, seen := u.isDir[name]; seen {
			if !isDir {
				return unsafeEntry(raw, "directory replaces a file of the same name")
			}
			return nil // implied by an earlier entry
		}
		return u.mkdir(raw, name)
	}
	if _, seen := u.isDir[name]; seen {
		return unsafeEntry(raw, "file replaces a directory of the same name")
	}
	if link {
		return u.symlink(raw, name, hdr.Linkname)
	}
	return u.file(hdr, tr, name)
}

// parents creates the directories above name that no entry created yet.
func (u *unpacker) parents(raw, name string) error {
	for i := 0; i < len(name); i++ {
		if name[i] != '/' {
			continue
		}
		p := name[:i]
		isDir, seen := u.isDir[p]
		if seen && !isDir {
			return unsafeEntry(raw, "parent %q is a file", p)
		}
		if !seen {
			if err := u.mkdir(raw, p); err != nil {
				return err
			}
		}
	}
	return nil
}

func (u *unpacker) mkdir(raw, name string) error {
	if err := u.root.Mkdir(name, 0o755); err != nil {
		return fmt.Errorf("unpacking %q: %w", raw, err)
	}
	u.isDir[name] = true
	u.recs = append(u.recs, record{Path: name, Dir: true, Mode: modeDir})
	return nil
}

func (u *unpacker) symlink(raw, name, target string) error {
	if err := oci.CheckSymlink(name, target); err != nil {
		return unsafeEntry(raw, "%v", err)
	}
	if err := u.root.Symlink(target, name); err != nil {
		return fmt.Errorf("unpacking %q: %w", raw, err)
	}
	u.isDir[name] = false // nothing goes below it
	u.recs = append(u.recs, record{Path: name, Mode: modeLink, Link: target})
	return nil
}

func (u *unpacker) file(hdr *tar.Header, tr io.Reader, name string) error {
	raw := hdr.Name
	limit := min(u.lim.MaxFileBytes, u.lim.MaxTotalBytes-u.total)
	if hdr.Size > u.lim.MaxFileBytes {
		return tooLarge(raw, "%d bytes, the limit per file is %d", hdr.Size, u.lim.MaxFileBytes)
	}
	if hdr.Size > limit {
		return tooLarge(raw, "unpacking it would exceed the limit of %d bytes per archive", u.lim.MaxTotalBytes)
	}
	mode := uint32(modeFile)
	if hdr.Mode&0o111 != 0 {
		mode = modeExec
	}
	f, err := u.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("unpacking %q: %w", raw, err)
	}
	h := sha256.New()
	n, err := io.CopyN(io.MultiWriter(f, h), tr, limit+1)
	if err != nil && err != io.EOF {
		f.Close()
		return fmt.Errorf("%w: entry %q: reading its content: %v", ErrUnsafeArchive, raw, err)
	}
	if n > limit { // only if the reader yields more than the header said
		f.Close()
		return tooLarge(raw, "more than %d bytes", limit)
	}
	if n != hdr.Size {
		f.Close()
		return unsafeEntry(raw, "header says %d bytes, the archive holds %d", hdr.Size, n)
	}
	u.total += n
	if err := f.Chmod(os.FileMode(mode)); err != nil {
		f.Close()
		return fmt.Errorf("unpacking %q: %w", raw, err)
	}
	// No fsync per file: seal flushes the whole tree with one syncfs before it is renamed
	// into place (an fsync per file made pulls of many-file wheels slower than tar -x).
	if err := f.Close(); err != nil {
		return fmt.Errorf("unpacking %q: %w", raw, err)
	}
	u.isDir[name] = false
	u.recs = append(u.recs, record{Path: name, Mode: mode, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))})
	return nil
}
