package interp

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/pylayer/pylayer/oci/untar"
)

// ErrUnsafeTarball: an interpreter tarball holds something Artifact refuses to
// unpack (a path leaving the tree, a link out of it, a device, a setuid bit,
// a duplicate ...), is not python-build-standalone's install_only layout, is
// not a readable gzip'd tar, or exceeds Limits. The error names the entry. It is
// untar.ErrUnsafe: every archive pylayer unpacks obeys one set of rules.
var ErrUnsafeTarball = untar.ErrUnsafe

// TopDir is the one top-level directory of an install_only tarball.
const TopDir = "python"

// Limits bound what a tarball may unpack to, counted on the bytes read.
type Limits = untar.Limits

// DefaultLimits: 200k entries, 1 GiB per file, 4 GiB in all (a CPython
// install_only tree is about 20k entries and 200 MiB).
func DefaultLimits() Limits {
	return Limits{MaxEntries: 200_000, MaxFileBytes: 1 << 30, MaxTotalBytes: 4 << 30}
}

// extract unpacks the gzip'd tar r, whose entries must all lie under TopDir/,
// into dst (which it creates and must not exist) with TopDir/ stripped, by
// untar's rules with what a prefix needs besides files and directories:
// symlinks that pass oci.CheckSymlink, hardlinks to a regular file unpacked
// before them, and PAX global headers. Files get mode 0755 or 0644,
// directories 0755. On error dst is removed.
func extract(ctx context.Context, r io.Reader, dst string, lim Limits) error {
	entries, err := untar.Extract(ctx, r, dst, untar.Options{
		Limits:        lim,
		What:          "interpreter tarball",
		Gzip:          true,
		Symlinks:      true,
		Hardlinks:     true,
		GlobalHeaders: true,
		Under:         TopDir,
	})
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Path == "bin" && e.Kind == untar.Dir {
			return nil
		}
	}
	os.RemoveAll(dst)
	return fmt.Errorf("unsafe interpreter tarball: no %s/bin/: not a python-build-standalone install_only tarball (%w)", TopDir, ErrUnsafeTarball)
}
