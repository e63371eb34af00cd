package interp

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci"
)

// interpreterPath is the interpreter of a prefix, relative to it.
const interpreterPath = "bin/python3"

// Probe runs the interpreter of the prefix (prefix/bin/python3) once with
// layers/target.Probe and returns its Config, Source SourcePrefix.
//
// Python writes bytecode next to the modules it imports, so the probe runs
// on a scratch clone of the prefix (hardlinks where possible, copies
// otherwise) that is removed afterwards: the prefix itself is never written.
// Symlinks in the prefix must pass oci.CheckSymlink.
func Probe(ctx context.Context, prefix string) (Config, error) {
	prefix, err := filepath.Abs(prefix)
	if err != nil {
		return Config{}, err
	}
	if err := checkPrefix(prefix); err != nil {
		return Config{}, err
	}
	scratch, err := os.MkdirTemp("", "pylayer-probe-*")
	if err != nil {
		return Config{}, fmt.Errorf("probing %s: %w", prefix, err)
	}
	defer os.RemoveAll(scratch)
	clone := filepath.Join(scratch, "python")
	if err := cloneTree(ctx, prefix, clone); err != nil {
		return Config{}, fmt.Errorf("probing %s: cloning the prefix: %w", prefix, err)
	}
	t, err := target.Probe(ctx, filepath.Join(clone, interpreterPath))
	if err != nil {
		return Config{}, fmt.Errorf("probing the interpreter of %s: %w", prefix, err)
	}
	c := configFromTarget(t, SourcePrefix)
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("probing %s: %w", prefix, err)
	}
	return c, nil
}

// checkPrefix makes sure prefix is a directory with bin/python3.
func checkPrefix(prefix string) error {
	fi, err := os.Stat(prefix)
	if err != nil {
		return fmt.Errorf("python prefix: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("python prefix %s is not a directory", prefix)
	}
	if _, err := os.Lstat(filepath.Join(prefix, interpreterPath)); err != nil {
		return fmt.Errorf("%s has no %s: not a CPython prefix (python-build-standalone's install_only layout, or bin/ and lib/python3.X/)", prefix, interpreterPath)
	}
	return nil
}

// cloneTree recreates the tree at src under dst (which must not exist):
// directories, regular files (hardlinked, copied when linking fails) and
// symlinks that pass oci.CheckSymlink. Anything else is an error.
func cloneTree(ctx context.Context, src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		switch t := d.Type(); {
		case d.IsDir():
			return os.Mkdir(out, 0o755)
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := oci.CheckSymlink(filepath.ToSlash(rel), target); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			return os.Symlink(target, out)
		case t.IsRegular():
			if os.Link(p, out) == nil {
				return nil
			}
			return copyFile(p, out)
		default:
			return fmt.Errorf("%s is a %v: a prefix holds files, directories and symlinks only", rel, t)
		}
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm()&0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
