package cache

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	"github.com/pylayer/pylayer/oci/untar"
)

var (
	// ErrUnsafeArchive: a layer blob holds something the cache refuses to
	// unpack (a link, a device, a setuid bit, a path escaping the tree, a
	// duplicate entry ...) or is not a readable tar. The error names the entry.
	// It is untar.ErrUnsafe: every archive pylayer unpacks obeys one set of rules.
	ErrUnsafeArchive = untar.ErrUnsafe
	// ErrTooLarge: a layer blob exceeds the cache's entry-count or size limits.
	// Such errors also wrap ErrUnsafeArchive.
	ErrTooLarge = untar.ErrTooLarge
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

// checkName validates a path of a tree (untar.CheckName) that is not under
// the reserved metaDir. The paths of a .files manifest obey it too.
func checkName(name string) error {
	if err := untar.CheckName(name); err != nil {
		return err
	}
	if first, _, _ := strings.Cut(name, "/"); first == metaDir {
		return fmt.Errorf("%s/ is reserved for the cache's metadata", metaDir)
	}
	return nil
}

// unpack extracts a layer blob (a tar, gzip'd when compressed) into dst, which
// it creates and must not exist, with untar's rules: regular files and
// directories only, and when links is set (interpreter artifacts only) symlinks
// that stay inside the tree. It returns the tree's records, sorted by path, with
// the content hash of every file (newContentHash). Files get their final read-only modes; directories
// keep 0755 (seal makes them read-only). On error dst is removed.
//
// A blob held in memory (r has Bytes, as a fetched blobMem or a bytes.Buffer) is
// unpacked with untar.ExtractBytes, which inflates a member per call where it can,
// into scratch's storage (see ExtractBytes) when scratch is set.
func unpack(ctx context.Context, r io.Reader, mediaType string, dst string, lim Limits, links bool, scratch *[]byte) ([]record, error) {
	o := untar.Options{
		Limits:   untar.Limits{MaxEntries: lim.MaxEntries, MaxFileBytes: lim.MaxFileBytes, MaxTotalBytes: lim.MaxTotalBytes},
		What:     "layer archive",
		Gzip:     mediaType == v1.MediaTypeImageLayerGzip,
		Zstd:     mediaType == v1.MediaTypeImageLayerZstd,
		Symlinks: links,
		Reserved: []string{metaDir},
		ReadOnly: true,
		Hash:     newContentHash,
	}
	var entries []untar.Entry
	var err error
	if m, ok := r.(interface{ Bytes() []byte }); ok {
		entries, err = untar.ExtractBytes(ctx, m.Bytes(), dst, o, scratch)
	} else {
		entries, err = untar.Extract(ctx, r, dst, o)
	}
	if err != nil {
		return nil, err
	}
	recs := make([]record, len(entries))
	for i, e := range entries {
		switch e.Kind {
		case untar.Dir:
			recs[i] = record{Path: e.Path, Dir: true, Mode: modeDir}
		case untar.Symlink:
			recs[i] = record{Path: e.Path, Mode: modeLink, Link: e.Link}
		default:
			recs[i] = record{Path: e.Path, Mode: uint32(e.Mode.Perm()), Size: e.Size, XXH64: hex.EncodeToString(e.Sum)}
		}
	}
	return recs, nil
}
