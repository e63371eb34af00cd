package oci

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/gzip"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// GzipLevel is the fixed compression level of layer blobs. Level 6 (zlib's
// default) is about 4x faster than 9 on site-packages trees for ~1% larger
// blobs. The compressor is github.com/klauspost/compress, 2.2x faster than the
// standard library's on the office set (111 vs 244 ms), pinned by go.mod so its
// output does not change with the Go toolchain. Changing the level or its version
// changes every layer digest, which the golden tests in this package catch.
const GzipLevel = 6

// GzipMember is how many bytes of tar each gzip member of a layer blob holds, the last
// one the rest (RFC 1952 streams may be any number of members; every gzip reader,
// tar -xz included, reads them as one). A puller inflates such a blob one member at a
// time, each in one call, into one buffer of this size (oci/untar, with libdeflate),
// where a blob of one member must be inflated into a buffer as large as its whole tar
// or streamed: the curated set's pull held about 120 MB of such buffers, fresh memory
// whose page faults were a third of its CPU on a machine whose memory the hypervisor
// backs lazily. A boundary every 4 MiB costs ~0.1% of blob size (the 32 KiB window
// restarts) and changes no byte of the tar, so DiffIDs are unchanged.
const GzipMember = 4 << 20

// MaxZstdWindow bounds the memory a zstd frame may make its decoder hold (its window):
// 64 MiB, eight times what zstd's highest standard level (19) uses. A stream that asks
// for more (zstd --long, or a hostile one) fails to read, naming its window.
const MaxZstdWindow = 64 << 20

// LayerReader returns the tar stream of a layer blob of mediaType read from r: a plain,
// gzip'd or zstd-compressed (ZstdReader) tar; any other media type is an error naming
// it. Closing it does not close r.
func LayerReader(r io.Reader, mediaType string) (io.ReadCloser, error) {
	switch mediaType {
	case v1.MediaTypeImageLayerGzip:
		return gzip.NewReader(r)
	case v1.MediaTypeImageLayerZstd:
		return ZstdReader(r)
	case v1.MediaTypeImageLayer:
		return io.NopCloser(r), nil
	}
	return nil, fmt.Errorf("layer media type %q: want a tar, plain, gzip'd or zstd-compressed", mediaType)
}

// ErrUnsupportedFile: the tree holds something other than regular files and
// directories (a symlink, fifo, socket or device), or a name that cannot be stored.
var ErrUnsupportedFile = errors.New("unsupported file in layer tree")

// treeEntry is one file or directory of the tree, named relative to the root
// with forward slashes (directories with a trailing "/").
type treeEntry struct {
	name string // tar name
	rel  string // path relative to root, for os.Root
	info fs.FileInfo
	link string // symlink target (TarTreeWith with AllowSymlinks only)
}

// TarTreeOptions changes what TarTreeWith accepts; the zero value is TarTree.
type TarTreeOptions struct {
	// AllowSymlinks stores symbolic links whose target passes CheckSymlink
	// (relative, clean, resolving inside the root) as symlink entries with
	// mode 0777; other symlinks are still an error wrapping ErrUnsupportedFile.
	// Interpreter prefixes need it (bin/python3 -> python3.11); package
	// layers never set it.
	AllowSymlinks bool
}

// TarTree writes a reproducible gzip'd tar of the directory tree at root to w.
//
// Entries are sorted bytewise by name, directories included with a trailing
// "/" (the root itself is not an entry). Only regular files and directories
// are allowed: anything else, symlinks included, is an error naming the path
// and wrapping ErrUnsupportedFile. Headers carry mtime 0, uid/gid 0, empty
// uname/gname, mode 0755 for directories and executables (any exec bit set),
// 0644 for other files, no setuid/setgid/sticky bits. Headers are USTAR; a name
// USTAR cannot hold (too long, non-ASCII) gets a PAX header instead, which Go
// writes deterministically. The gzip header has no name, no mtime and OS 255,
// and the level is GzipLevel.
//
// It returns the descriptor of the compressed blob (MediaTypeLayer, digest,
// size) and the DiffID, the sha256 of the uncompressed tar. On error, w may
// hold a partial stream: write to a temporary file and discard it on error.
func TarTree(ctx context.Context, root string, w io.Writer) (desc v1.Descriptor, diffID digest.Digest, err error) {
	return TarTreeWith(ctx, root, w, TarTreeOptions{})
}

// TarTreeWith is TarTree with options; with the zero TarTreeOptions it writes
// the same bytes as TarTree.
func TarTreeWith(ctx context.Context, root string, w io.Writer, opts TarTreeOptions) (desc v1.Descriptor, diffID digest.Digest, err error) {
	return tarTree(ctx, root, w, opts, true)
}

// tarTree is TarTreeWith; without withDiffID it leaves the uncompressed tar unhashed and
// returns no DiffID.
func tarTree(ctx context.Context, root string, w io.Writer, opts TarTreeOptions, withDiffID bool) (desc v1.Descriptor, diffID digest.Digest, err error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return v1.Descriptor{}, "", fmt.Errorf("opening layer tree %q: %w", root, err)
	}
	defer r.Close()

	entries, err := walkTree(ctx, r, root, opts)
	if err != nil {
		return v1.Descriptor{}, "", err
	}

	blobHash, tarHash := sha256.New(), sha256.New()
	counter := &countWriter{}
	gz, err := newMembers(io.MultiWriter(w, blobHash, counter))
	if err != nil {
		return v1.Descriptor{}, "", err
	}
	var tarOut io.Writer = gz
	if withDiffID {
		tarOut = io.MultiWriter(gz, tarHash)
	}
	tw := tar.NewWriter(tarOut)
	files := &dirFiles{root: r}
	defer files.close()
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return v1.Descriptor{}, "", err
		}
		if err := writeEntry(tw, files, root, e); err != nil {
			return v1.Descriptor{}, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return v1.Descriptor{}, "", fmt.Errorf("finishing tar of %q: %w", root, err)
	}
	if err := gz.Close(); err != nil {
		return v1.Descriptor{}, "", fmt.Errorf("finishing gzip of %q: %w", root, err)
	}
	desc = v1.Descriptor{
		MediaType: MediaTypeLayer,
		Digest:    sumDigest(blobHash),
		Size:      counter.n,
	}
	if withDiffID {
		diffID = sumDigest(tarHash)
	}
	return desc, diffID, nil
}

// members writes a gzip stream of GzipMember-byte members (the last one shorter).
type members struct {
	gz *gzip.Writer
	w  io.Writer
	n  int // bytes written to the current member
}

func newMembers(w io.Writer) (*members, error) {
	gz, err := gzip.NewWriterLevel(w, GzipLevel)
	if err != nil {
		return nil, fmt.Errorf("creating gzip writer: %w", err)
	}
	m := &members{gz: gz, w: w}
	m.header()
	return m, nil
}

// header sets each member's header. Explicit, although these are the zero values: no
// name, no mtime, OS unknown. klauspost writes a zero time as its (garbage) Unix value;
// epoch 0 means "no mtime".
func (m *members) header() { m.gz.Header = gzip.Header{OS: 255, ModTime: time.Unix(0, 0)} }

func (m *members) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if m.n == GzipMember { // a member starts only for bytes it will hold: never an empty one
			if err := m.gz.Close(); err != nil {
				return written, err
			}
			m.gz.Reset(m.w)
			m.header()
			m.n = 0
		}
		k := min(len(p), GzipMember-m.n)
		n, err := m.gz.Write(p[:k])
		written, m.n = written+n, m.n+n
		if err != nil {
			return written, err
		}
		p = p[k:]
	}
	return written, nil
}

func (m *members) Close() error { return m.gz.Close() }

// TreeDigest is the DiffID TarTreeWith would return for root with opts (the sha256 of
// the uncompressed reproducible tar), computed without compressing or writing anything:
// a digest of the tree's names, types, modes, link targets and bytes, nothing else (no
// times, no owners). Interpreter artifacts are named by it.
func TreeDigest(ctx context.Context, root string, opts TarTreeOptions) (digest.Digest, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return "", fmt.Errorf("opening tree %q: %w", root, err)
	}
	defer r.Close()
	entries, err := walkTree(ctx, r, root, opts)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	tw := tar.NewWriter(h)
	files := &dirFiles{root: r}
	defer files.close()
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if err := writeEntry(tw, files, root, e); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", fmt.Errorf("finishing tar of %q: %w", root, err)
	}
	return sumDigest(h), nil
}

// walkTree lists the tree below r, refusing anything that is not a regular
// file or directory, sorted bytewise by tar name.
func walkTree(ctx context.Context, r *os.Root, root string, opts TarTreeOptions) ([]treeEntry, error) {
	var entries []treeEntry
	var walk func(rel string, want fs.FileInfo) error
	walk = func(rel string, want fs.FileInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, err := r.Open(rel)
		if err != nil {
			return fmt.Errorf("opening directory %q in %q: %w", rel, root, err)
		}
		if want != nil {
			// Still the directory we listed, not a link swapped in since.
			if now, err := d.Stat(); err != nil || !os.SameFile(now, want) {
				d.Close()
				return fmt.Errorf("directory %q in %q changed while building the layer", rel, root)
			}
		}
		infos, err := d.Readdir(-1)
		d.Close()
		if err != nil {
			return fmt.Errorf("reading directory %q in %q: %w", rel, root, err)
		}
		for _, info := range infos {
			childRel := path.Join(rel, info.Name())
			if !utf8.ValidString(childRel) {
				return fmt.Errorf("%w: %q in %q: name is not valid UTF-8", ErrUnsupportedFile, childRel, root)
			}
			switch mode := info.Mode(); {
			case mode.IsDir():
				entries = append(entries, treeEntry{name: childRel + "/", rel: childRel, info: info})
				if err := walk(childRel, info); err != nil {
					return err
				}
			case mode.IsRegular():
				entries = append(entries, treeEntry{name: childRel, rel: childRel, info: info})
			case mode&fs.ModeSymlink != 0 && opts.AllowSymlinks:
				target, err := r.Readlink(childRel)
				if err != nil {
					return fmt.Errorf("reading symlink %q in %q: %w", childRel, root, err)
				}
				if err := CheckSymlink(childRel, target); err != nil {
					return fmt.Errorf("%w: %q in %q: %v", ErrUnsupportedFile, childRel, root, err)
				}
				entries = append(entries, treeEntry{name: childRel, rel: childRel, info: info, link: target})
			default:
				return fmt.Errorf("%w: %q in %q is a %s; only regular files and directories can go into a layer",
					ErrUnsupportedFile, childRel, root, fileKind(mode))
			}
		}
		return nil
	}
	if err := walk(".", nil); err != nil {
		return nil, err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	return entries, nil
}

// dirFiles opens the files of a tree in name order: each through the directory that
// holds it, opened (inside the root, following no link) once for its run of files.
type dirFiles struct {
	root *os.Root
	dir  string   // the directory cur is, relative to root
	cur  *os.Root // nil: none open yet
}

func (d *dirFiles) open(rel string) (*os.File, error) {
	dir := path.Dir(rel)
	if dir == "." {
		return d.root.Open(rel)
	}
	if d.cur == nil || d.dir != dir {
		d.close()
		r, err := d.root.OpenRoot(dir)
		if err != nil {
			return nil, err
		}
		d.cur, d.dir = r, dir
	}
	return d.cur.Open(path.Base(rel))
}

func (d *dirFiles) close() {
	if d.cur != nil {
		d.cur.Close()
		d.cur = nil
	}
}

func writeEntry(tw *tar.Writer, files *dirFiles, root string, e treeEntry) error {
	hdr := &tar.Header{
		Name:    e.name,
		ModTime: time.Unix(0, 0),
		Mode:    0o644,
		// Uid, Gid 0, Uname, Gname "" and Format unset: Go picks USTAR when the
		// header fits and PAX otherwise, never GNU for these entry types.
	}
	if e.info.IsDir() {
		hdr.Typeflag = tar.TypeDir
		hdr.Mode = 0o755
		return writeHeader(tw, hdr, root)
	}
	if e.info.Mode()&fs.ModeSymlink != 0 {
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = e.link
		hdr.Mode = 0o777
		return writeHeader(tw, hdr, root)
	}
	hdr.Typeflag = tar.TypeReg
	if e.info.Mode().Perm()&0o111 != 0 {
		hdr.Mode = 0o755
	}
	hdr.Size = e.info.Size()

	f, err := files.open(e.rel)
	if err != nil {
		return fmt.Errorf("opening %q in %q: %w", e.rel, root, err)
	}
	defer f.Close()
	// The file must still be the one we listed: not swapped for a link or
	// another file between the walk and now.
	now, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %q in %q: %w", e.rel, root, err)
	}
	if !os.SameFile(now, e.info) || !now.Mode().IsRegular() || now.Size() != e.info.Size() {
		return fmt.Errorf("%q in %q changed while building the layer", e.rel, root)
	}
	if err := writeHeader(tw, hdr, root); err != nil {
		return err
	}
	buf := copyBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(struct{ io.Writer }{tw}, io.LimitReader(f, hdr.Size), *buf)
	copyBufs.Put(buf)
	if err == nil && n < hdr.Size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return fmt.Errorf("copying %q in %q (did it change while building the layer?): %w", e.rel, root, err)
	}
	var one [1]byte
	if n, _ := f.Read(one[:]); n != 0 {
		return fmt.Errorf("%q in %q grew while building the layer", e.rel, root)
	}
	return nil
}

// copyBufs are the buffers files are copied into the tar through: one per copy of a
// thousand files would be a lot to allocate and collect.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func writeHeader(tw *tar.Writer, hdr *tar.Header, root string) error {
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("writing tar header for %q in %q: %w", hdr.Name, root, err)
	}
	return nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (fifo)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	default:
		return "irregular file (" + strings.TrimSpace(m.Type().String()) + ")"
	}
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

func sumDigest(h hash.Hash) digest.Digest {
	return digest.NewDigestFromBytes(digest.SHA256, h.Sum(nil))
}
