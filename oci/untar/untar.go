package untar

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/klauspost/compress/gzip"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/internal/gunzip"
	"github.com/pylayer/pylayer/oci"
)

var (
	// ErrUnsafe: the archive holds something Extract refuses to unpack (a link
	// where none is allowed, a device, a setuid bit, a path escaping the tree, a
	// duplicate entry, a PAX record it does not know ...) or is not a readable
	// tar. The error names the entry.
	ErrUnsafe = errors.New("unsafe archive")
	// ErrTooLarge: the archive exceeds the entry-count or size limits. Such
	// errors also match ErrUnsafe.
	ErrTooLarge = errors.New("archive too large")
)

// Limits bound what one archive may unpack to. They are enforced on the bytes
// actually read, not on what headers claim.
type Limits struct {
	MaxEntries    int   // tar entries (files, directories and links)
	MaxFileBytes  int64 // uncompressed bytes of one file
	MaxTotalBytes int64 // uncompressed bytes of all files
}

// errOptions: Extract was called with options that contradict each other.
var errOptions = errors.New("invalid options")

// DefaultLimits: 100k entries, 1 GiB per file, 4 GiB in all.
func DefaultLimits() Limits {
	return Limits{MaxEntries: 100_000, MaxFileBytes: 1 << 30, MaxTotalBytes: 4 << 30}
}

// Options say what differs legitimately between archives; the zero value (with
// Limits set) is the strictest: a plain tar of regular files and directories.
type Options struct {
	Limits Limits
	// What the archive is, for messages: "layer archive", "interpreter
	// tarball". The default is "archive".
	What string
	// Gzip: the stream is a gzip'd tar.
	Gzip bool
	// Zstd: the stream is a zstd-compressed tar (OCI tar+zstd), read by oci.ZstdReader;
	// not with Gzip.
	Zstd bool
	// Symlinks accepts symbolic links whose target passes oci.CheckSymlink
	// (relative, clean, resolving inside the tree). Interpreter artifacts only.
	Symlinks bool
	// Hardlinks accepts hard links to a regular file unpacked before them.
	// Interpreter tarballs only.
	Hardlinks bool
	// GlobalHeaders accepts PAX global headers (their records are checked like
	// any others, then ignored), as some tarball builders write them.
	GlobalHeaders bool
	// Under, when set, is the one top-level directory every entry must lie in;
	// it is stripped from the names ("python" for python-build-standalone).
	Under string
	// Reserved are top-level names no entry may use (the cache's ".pylayer").
	Reserved []string
	// Hash, when set, makes the hash of every file's content, which Entry.Sum
	// holds; nil hashes nothing. The content is hashed as it is written, with no
	// second read.
	Hash func() hash.Hash
	// ReadOnly gives files mode 0444 or 0555 instead of 0644 or 0755.
	// Directories are always made 0755, so that the caller can still move the
	// tree; making them read-only is its job once it is done.
	ReadOnly bool
}

// Kind is what an Entry is.
type Kind uint8

const (
	Dir Kind = iota + 1
	File
	Symlink
)

// Entry is one path Extract made, relative to the root, slash-separated. A hard
// link is recorded as the File it links to (same mode, size and sum).
type Entry struct {
	Path string
	Kind Kind
	Mode fs.FileMode // of a File: 0644/0755, or 0444/0555 with ReadOnly
	Size int64       // of a File
	Sum  []byte      // of a File, its content's Options.Hash (nil without one)
	Link string      // of a Symlink, its target
}

// Extract reads a tar (gzip'd with o.Gzip, zstd-compressed with o.Zstd) from r and
// unpacks it under dst, which it creates and must not exist, refusing everything the
// package doc lists (ErrUnsafe, ErrTooLarge). It returns what it made, sorted by path,
// with the hash of every file when o.Hash is set. Files are not fsynced: callers flush
// the whole tree once (fsx.SyncFS). On error dst is removed.
func Extract(ctx context.Context, r io.Reader, dst string, o Options) (entries []Entry, err error) {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return nil, fmt.Errorf("creating the directory to unpack into: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dst)
		}
	}()
	t, err := openTree(dst)
	if err != nil {
		return nil, fmt.Errorf("opening the directory to unpack into: %w", err)
	}
	defer t.close() // before the RemoveAll above
	x := &extractor{tree: t, o: o, made: map[string]Kind{}, named: map[string]bool{}, files: map[string]int{},
		buf: make([]byte, copyBuffer)}
	if o.Hash != nil {
		x.h = o.Hash()
	}
	if x.o.What == "" {
		x.o.What = "archive"
	}
	src := fsx.Reader(ctx, r)
	if o.Gzip && o.Zstd {
		return nil, fmt.Errorf("unpacking: %w: a stream is gzip'd or zstd-compressed, not both", errOptions)
	}
	if o.Zstd {
		zr, err := oci.ZstdReader(src)
		if err != nil {
			return nil, fmt.Errorf("unpacking: %w", err)
		}
		defer zr.Close()
		src = zr
	}
	if o.Gzip {
		zr, err := gzip.NewReader(src)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return nil, cerr
			}
			return nil, x.unsafe("", "not a gzip stream: %v", err)
		}
		defer zr.Close()
		src = zr
	}
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
			if cerr := ctx.Err(); cerr != nil {
				return nil, cerr
			}
			return nil, x.unsafe("", "reading the tar after %d entries: %v", x.count, err)
		}
		if err := x.entry(hdr, tr); err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return nil, cerr // the read failed because ctx is done
			}
			return nil, err
		}
	}
	if x.count == 0 {
		return nil, x.unsafe("", "the archive has no entries")
	}
	sort.Slice(x.out, func(i, j int) bool { return x.out[i].Path < x.out[j].Path })
	return x.out, nil
}

// maxWhole bounds the inflated size of an archive ExtractBytes inflates in one
// call: above it, the archive is streamed through a small window, as by Extract.
const maxWhole = 128 << 20

// ExtractBytes is Extract of an archive held in memory, b. With libdeflate
// (gunzip.Available), a gzip'd one is inflated about twice as fast as streaming it:
// one of members of at most oci.GzipMember bytes each (as oci writes layer blobs, or
// any of one small member) one member at a time into a buffer of that size; one
// plain single member of at most 128 MiB in one call into a buffer of its size. Any
// other, a bad one included, is streamed as Extract streams it, with the same
// errors (a member the fast path declines half-way is thrown away with what it
// unpacked, and the archive streamed from the start). With scratch set, it inflates
// into *scratch's storage, and leaves there the storage it used (grown if it had to
// be) for the caller's next call.
func ExtractBytes(ctx context.Context, b []byte, dst string, o Options, scratch *[]byte) ([]Entry, error) {
	if !o.Gzip || o.Zstd || !gunzip.Available {
		return Extract(ctx, bytes.NewReader(b), dst, o)
	}
	var into []byte
	if scratch != nil {
		into = *scratch
	}
	plain := o
	plain.Gzip = false
	if cap(into) < oci.GzipMember {
		into = make([]byte, oci.GzipMember)
	}
	if m, ok := gunzip.NewMembers(b, into[:oci.GzipMember]); ok {
		if scratch != nil {
			*scratch = into[:0]
		}
		out, err := Extract(ctx, m, dst, plain)
		if !m.Declined() {
			return out, err
		}
	} else if out, ok := gunzip.Whole(into, b, maxWhole); ok {
		if scratch != nil {
			*scratch = out[:0]
		}
		return Extract(ctx, bytes.NewReader(out), dst, plain)
	}
	return Extract(ctx, bytes.NewReader(b), dst, o)
}

// tree makes what an archive holds below the directory being unpacked into.
// The extractor names only clean relative paths whose parents it made as
// directories, so an implementation never resolves anything through a symlink.
type tree interface {
	mkdir(name string) error // mode 0755
	symlink(target, name string) error
	link(oldname, newname string) error
	create(name string, mode fs.FileMode) (file, error) // a new regular file, to have mode once finished
	close()
}

// file is a regular file being written.
type file interface {
	io.Writer
	finish(mode fs.FileMode) error // makes sure it has mode (which the umask may have narrowed), closes
	abort()                        // closes; Extract removes everything on error
}

// copyBuffer is the size of the one buffer an extraction copies file content
// through.
const copyBuffer = 256 << 10

type extractor struct {
	tree  tree
	buf   []byte    // file content passes through it
	h     hash.Hash // Options.Hash's, reset for every file; nil without one
	o     Options
	made  map[string]Kind // every path made, named by an entry or implied
	named map[string]bool // paths named by an entry
	files map[string]int  // index in out of every regular file, for hard links
	count int
	total int64
	out   []Entry
}

// unsafeError is ErrUnsafe, and ErrTooLarge when large, worded for the archive
// at hand ("unsafe layer archive: entry ...").
type unsafeError struct {
	msg   string
	large bool
}

func (e *unsafeError) Error() string { return e.msg }

func (e *unsafeError) Is(target error) bool {
	return target == ErrUnsafe || e.large && target == ErrTooLarge
}

// unsafe is an ErrUnsafe naming entry name ("" for the archive as a whole).
func (x *extractor) unsafe(name, format string, args ...any) error {
	msg := "unsafe " + x.o.What + ": "
	if name != "" {
		msg += fmt.Sprintf("entry %q: ", name)
	}
	return &unsafeError{msg: msg + fmt.Sprintf(format, args...)}
}

// tooLarge is an ErrTooLarge (and ErrUnsafe) naming entry name.
func (x *extractor) tooLarge(name, format string, args ...any) error {
	return &unsafeError{msg: fmt.Sprintf("%s too large: entry %q: %s", x.o.What, name, fmt.Sprintf(format, args...)), large: true}
}

func (x *extractor) allowed() string {
	switch {
	case x.o.Symlinks && x.o.Hardlinks:
		return "this archive may hold only regular files, directories, and links inside its tree"
	case x.o.Symlinks:
		return "this archive may hold only regular files, directories and symlinks inside its tree"
	}
	return "this archive may hold only regular files and directories"
}

func (x *extractor) entry(hdr *tar.Header, tr io.Reader) error {
	raw := hdr.Name
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		if !x.o.GlobalHeaders {
			return x.unsafe(raw, "PAX global header: %s", x.allowed())
		}
		if err := checkPAX(hdr.PAXRecords); err != nil {
			return x.unsafe(raw, "PAX global header: %v", err)
		}
		return nil // it names no file
	}
	x.count++
	if x.count > x.o.Limits.MaxEntries {
		return x.tooLarge(raw, "more than %d entries", x.o.Limits.MaxEntries)
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeDir:
	case tar.TypeSymlink:
		if !x.o.Symlinks {
			return x.unsafe(raw, "symlink to %q: %s", hdr.Linkname, x.allowed())
		}
	case tar.TypeLink:
		if !x.o.Hardlinks {
			return x.unsafe(raw, "hardlink to %q: %s", hdr.Linkname, x.allowed())
		}
	case tar.TypeChar, tar.TypeBlock:
		return x.unsafe(raw, "device node (tar entry type %q): %s", hdr.Typeflag, x.allowed())
	case tar.TypeFifo:
		return x.unsafe(raw, "named pipe (tar entry type %q): %s", hdr.Typeflag, x.allowed())
	default:
		return x.unsafe(raw, "tar entry type %q: %s", hdr.Typeflag, x.allowed())
	}
	if err := checkPAX(hdr.PAXRecords); err != nil {
		return x.unsafe(raw, "%v", err)
	}
	name, err := x.strip(raw, hdr.Typeflag == tar.TypeDir)
	if err != nil {
		return x.unsafe(raw, "%v", err)
	}
	if hdr.Mode&0o7000 != 0 {
		return x.unsafe(raw, "mode %#o has setuid, setgid or sticky bits", hdr.Mode)
	}
	if x.named[name] {
		return x.unsafe(raw, "duplicate entry")
	}
	x.named[name] = true
	if name == "" { // Under itself
		if hdr.Typeflag != tar.TypeDir {
			return x.unsafe(raw, "%s must be a directory", x.o.Under)
		}
		return nil
	}
	if err := x.parents(raw, name); err != nil {
		return err
	}
	if k, seen := x.made[name]; seen {
		if hdr.Typeflag == tar.TypeDir && k == Dir {
			return nil // implied by an earlier entry
		}
		return x.unsafe(raw, "replaces a %s of the same name", kindName(k))
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.mkdir(raw, name)
	case tar.TypeSymlink:
		return x.symlink(raw, name, hdr.Linkname)
	case tar.TypeLink:
		return x.hardlink(raw, name, hdr.Linkname)
	}
	return x.file(hdr, tr, name)
}

func kindName(k Kind) string {
	switch k {
	case Dir:
		return "directory"
	case Symlink:
		return "symlink"
	}
	return "file"
}

// strip validates a tar name and returns it relative to o.Under ("" for Under
// itself).
func (x *extractor) strip(raw string, dir bool) (string, error) {
	name := raw
	if dir {
		name = strings.TrimSuffix(name, "/")
	}
	if err := CheckName(name); err != nil {
		return "", err
	}
	if x.o.Under != "" {
		if name == x.o.Under {
			return "", nil
		}
		rel, ok := strings.CutPrefix(name, x.o.Under+"/")
		if !ok {
			return "", fmt.Errorf("outside %s/, the one directory this archive may hold", x.o.Under)
		}
		name = rel
	}
	first, _, _ := strings.Cut(name, "/")
	for _, r := range x.o.Reserved {
		if first == r {
			return "", fmt.Errorf("%s/ is reserved", r)
		}
	}
	return name, nil
}

// parents creates the directories above name that no entry made yet, and
// refuses a parent that is a file or a symlink: nothing is written through one.
func (x *extractor) parents(raw, name string) error {
	for i := 0; i < len(name); i++ {
		if name[i] != '/' {
			continue
		}
		p := name[:i]
		k, seen := x.made[p]
		switch {
		case !seen:
			if err := x.mkdir(raw, p); err != nil {
				return err
			}
		case k != Dir:
			return x.unsafe(raw, "parent %q is not a directory", p)
		}
	}
	return nil
}

func (x *extractor) mkdir(raw, name string) error {
	if err := x.tree.mkdir(name); err != nil {
		return fmt.Errorf("unpacking %q: %w", raw, err)
	}
	x.made[name] = Dir
	x.out = append(x.out, Entry{Path: name, Kind: Dir, Mode: fs.ModeDir | 0o755})
	return nil
}

func (x *extractor) symlink(raw, name, target string) error {
	if err := oci.CheckSymlink(name, target); err != nil {
		return x.unsafe(raw, "%v", err)
	}
	if err := x.tree.symlink(target, name); err != nil {
		return fmt.Errorf("unpacking %q: %w", raw, err)
	}
	x.made[name] = Symlink
	x.out = append(x.out, Entry{Path: name, Kind: Symlink, Mode: fs.ModeSymlink | 0o777, Link: target})
	return nil
}

func (x *extractor) hardlink(raw, name, target string) error {
	old, err := x.strip(target, false)
	if err != nil || old == "" {
		if err == nil {
			err = fmt.Errorf("it is %s/ itself", x.o.Under)
		}
		return x.unsafe(raw, "hardlink to %q: %v", target, err)
	}
	i, ok := x.files[old]
	if !ok {
		return x.unsafe(raw, "hardlink to %q, which is not a regular file unpacked before it", target)
	}
	if err := x.tree.link(old, name); err != nil {
		return fmt.Errorf("unpacking %q: %w", raw, err)
	}
	e := x.out[i]
	e.Path = name
	x.made[name] = File
	x.files[name] = len(x.out)
	x.out = append(x.out, e)
	return nil
}

func (x *extractor) file(hdr *tar.Header, tr io.Reader, name string) error {
	raw := hdr.Name
	lim := x.o.Limits
	limit := min(lim.MaxFileBytes, lim.MaxTotalBytes-x.total)
	if hdr.Size > lim.MaxFileBytes {
		return x.tooLarge(raw, "%d bytes, the limit per file is %d", hdr.Size, lim.MaxFileBytes)
	}
	if hdr.Size > limit {
		return x.tooLarge(raw, "unpacking it would exceed the limit of %d bytes per archive", lim.MaxTotalBytes)
	}
	mode := fs.FileMode(0o644)
	if hdr.Mode&0o111 != 0 {
		mode = 0o755
	}
	if x.o.ReadOnly {
		mode &^= 0o200
	}
	f, err := x.tree.create(name, mode)
	if err != nil {
		return fmt.Errorf("unpacking %q: %w", raw, err)
	}
	n, err := x.copy(f, tr, limit+1)
	if err != nil {
		f.abort()
		var we *writeError
		if errors.As(err, &we) {
			return fmt.Errorf("unpacking %q: %w", raw, we.err)
		}
		return x.unsafe(raw, "reading its content: %v", err)
	}
	if n > limit { // only if the reader yields more than the header said
		f.abort()
		return x.tooLarge(raw, "more than %d bytes", limit)
	}
	if n != hdr.Size {
		f.abort()
		return x.unsafe(raw, "header says %d bytes, the archive holds %d", hdr.Size, n)
	}
	x.total += n
	if err := f.finish(mode); err != nil {
		return fmt.Errorf("unpacking %q: %w", raw, err)
	}
	x.made[name] = File
	x.files[name] = len(x.out)
	e := Entry{Path: name, Kind: File, Mode: mode, Size: n}
	if x.h != nil {
		e.Sum = x.h.Sum(nil)
	}
	x.out = append(x.out, e)
	return nil
}

// writeError is a failure to write what was read: the file system's, not the archive's.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }

// copy writes up to max bytes of r to f through x.buf, hashing them into x.h
// (reset first) if there is one, and returns how many it read.
func (x *extractor) copy(f io.Writer, r io.Reader, max int64) (int64, error) {
	if x.h != nil {
		x.h.Reset()
	}
	var n int64
	for n < max {
		b := x.buf[:min(int64(len(x.buf)), max-n)]
		k, err := r.Read(b)
		if k > 0 {
			if x.h != nil {
				x.h.Write(b[:k])
			}
			if _, werr := f.Write(b[:k]); werr != nil {
				return n, &writeError{werr}
			}
			n += int64(k)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
