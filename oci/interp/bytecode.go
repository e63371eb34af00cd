package interp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/pylayer/pylayer/layers/wheel"
)

// Bytecode is what Compile did to a prefix.
type Bytecode struct {
	// Dir is the prefix to probe and pack: the one given when its standard library
	// needed nothing, else a copy of it under the work directory with the .pyc added.
	Dir string
	// Stdlib is the standard library directory, relative to the prefix (lib/python3.11).
	Stdlib string
	// Compiled .pyc were written; Kept sources already had a hash-based one; Skipped
	// sources do not compile (Python 2 test data, bad encodings ...).
	Compiled, Kept, Skipped int
}

// Compile makes sure that the standard library of prefix carries, for every .py that
// compiles, the .pyc its interpreter would otherwise make on each import in a
// sandbox (where the prefix is read-only and PYTHONDONTWRITEBYTECODE is set): Debian's
// python3.11 prefix ships none of its 543, which made `import json, re, subprocess,
// email.parser` take three times as long as on the host.
//
// A .py whose .pyc (opt level 0, the interpreter's cache tag) is hash-based is kept as
// it is. One that has none, or a timestamp-based one, gets an unchecked-hash .pyc
// (PEP 552) compiled by the prefix's own interpreter through layers/wheel's Compiler,
// co_filename the in-sandbox path (MountPath/lib/python3.X/...): the same bytes on
// every build. A timestamp-based .pyc is replaced because it records the source's
// mtime, which the packed layer (mtime 0) does not keep: it would be stale in every
// sandbox, and the source compiled again on each import.
//
// The prefix is never written: when something is to be compiled, it is copied into a
// new directory under workDir (files hardlinked where the file system allows, .pyc
// written as new files beside them) and the .pyc go into the copy. workDir must be
// outside the prefix; the copy is removed with workDir.
func Compile(ctx context.Context, prefix, workDir string) (Bytecode, error) {
	b, err := compileStdlib(ctx, prefix, workDir, true)
	if err != nil {
		return Bytecode{}, fmt.Errorf("compiling the standard library of %s: %w", prefix, err)
	}
	return b, nil
}

// compileStdlib is Compile; with copy false, it compiles into prefix itself (a
// directory of the caller's own, such as an unpacked tarball).
func compileStdlib(ctx context.Context, prefix, workDir string, copy bool) (Bytecode, error) {
	prefix, err := filepath.Abs(prefix)
	if err != nil {
		return Bytecode{}, err
	}
	if err := checkPrefix(prefix); err != nil {
		return Bytecode{}, err
	}
	if copy && within(workDir, prefix) {
		return Bytecode{}, fmt.Errorf("work directory %s is inside the prefix: choose one outside it", workDir)
	}
	c, err := wheel.NewCompiler(ctx, filepath.Join(prefix, interpreterPath), min(runtime.GOMAXPROCS(0), 4))
	if err != nil {
		return Bytecode{}, err
	}
	defer c.Close()
	info, err := c.Describe(ctx)
	if err != nil {
		return Bytecode{}, err
	}
	b := Bytecode{Dir: prefix, Stdlib: fmt.Sprintf("lib/python%d.%d", info.Major, info.Minor)}
	todo, err := stdlibSources(filepath.Join(prefix, b.Stdlib), info.CacheTag)
	if err != nil {
		return Bytecode{}, err
	}
	b.Kept = todo.kept
	if len(todo.srcs) == 0 {
		return b, nil
	}
	var copied string
	if copy {
		if copied, err = os.MkdirTemp(workDir, "compiled-*"); err != nil {
			return Bytecode{}, err
		}
		b.Dir = filepath.Join(copied, TopDir)
		if err := copyTree(ctx, prefix, b.Dir); err != nil {
			os.RemoveAll(copied)
			return Bytecode{}, err
		}
	}
	pycs, skipped, err := c.CompileTree(ctx, filepath.Join(b.Dir, b.Stdlib), MountPath+"/"+b.Stdlib, todo.srcs)
	if err != nil {
		if copied != "" {
			os.RemoveAll(copied)
		}
		return Bytecode{}, err
	}
	b.Compiled, b.Skipped = len(pycs), len(skipped)
	if b.Compiled == 0 && copied != "" { // only sources that do not compile: the copy is the prefix
		b.Dir = prefix
		os.RemoveAll(copied)
	}
	return b, nil
}

// stdlibTodo is what stdlibSources found.
type stdlibTodo struct {
	srcs []string // to compile, slash paths relative to the standard library
	kept int      // with a hash-based .pyc already
}

// stdlibSources lists the .py files under lib whose .pyc (cache tag tag, opt level 0)
// is missing or timestamp-based, in walk order (sorted).
func stdlibSources(lib, tag string) (stdlibTodo, error) {
	var t stdlibTodo
	if tag == "" {
		return t, errors.New("the interpreter has no bytecode cache tag (sys.implementation.cache_tag is None): nothing to compile for")
	}
	err := filepath.WalkDir(lib, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "__pycache__" {
			return fs.SkipDir
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(d.Name(), ".py") {
			return nil
		}
		rel, err := filepath.Rel(lib, p)
		if err != nil {
			return err
		}
		pyc := filepath.Join(filepath.Dir(p), "__pycache__", strings.TrimSuffix(d.Name(), ".py")+"."+tag+".pyc")
		if hashBased(pyc) {
			t.kept++
			return nil
		}
		t.srcs = append(t.srcs, filepath.ToSlash(rel))
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return t, fmt.Errorf("no standard library at %s: not a CPython prefix laid out as lib/python3.X", lib)
	}
	return t, err
}

// hashBased reports whether the file at pyc is a .pyc whose flags (PEP 552) say it is
// validated by the source's hash, or not at all, rather than by its mtime.
func hashBased(pyc string) bool {
	f, err := os.Open(pyc)
	if err != nil {
		return false
	}
	defer f.Close()
	var h [8]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return false
	}
	return binary.LittleEndian.Uint32(h[4:])&1 != 0
}

// copyTree copies the tree at src (directories, regular files, symlinks) to dst,
// which must not exist: regular files are hardlinked, or copied where src is on
// another file system or links are refused.
func copyTree(ctx context.Context, src, dst string) error {
	link := true
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
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(to, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			if link {
				err := os.Link(p, to)
				if err == nil {
					return nil
				}
				link = false // another file system, or links refused: copy from now on
			}
			return copyFile(p, to, info.Mode().Perm())
		}
		return fmt.Errorf("%s: %s is neither a directory, a regular file nor a symlink", path.Join(filepath.ToSlash(rel)), info.Mode().Type())
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
