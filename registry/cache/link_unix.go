//go:build unix

package cache

import (
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// maxLinkDirs bounds the directory descriptors one linker keeps open (two per
// directory: the tree's and the layer's). Past it, they are all closed and
// opened again as needed: a tree's file list is sorted, so files of one
// directory mostly come together.
const maxLinkDirs = 128

// linker hardlinks the files of one tree into a layer being built, relative
// to descriptors of their directories on both sides: one linkat per file,
// where a linkat of two paths walks every component of both (about a quarter
// of the cost of linking a wheel's files on ext4). Directories are opened
// with O_NOFOLLOW, so no path is ever resolved through a symlink. Not safe
// for concurrent use; close releases its descriptors.
type linker struct {
	src, dst string            // the tree's root and the layer's
	dirs     map[string][2]int // relative directory -> its descriptors (tree, layer)
}

func newLinker(src, dst string) *linker {
	return &linker{src: src, dst: dst, dirs: map[string][2]int{}}
}

// link makes rel (a clean slash path) of the layer a hardlink of rel of the
// tree; its directory must exist on both sides.
func (l *linker) link(rel string) error {
	dir, base := path.Split(rel)
	dir = path.Clean(dir)
	if _, ok := l.dirs[dir]; !ok && len(l.dirs) >= maxLinkDirs {
		l.close() // never inside open, which holds its parents' descriptors
	}
	fds, err := l.open(dir)
	if err != nil {
		return &os.LinkError{Op: "link", Old: l.src + "/" + rel, New: l.dst + "/" + rel, Err: err}
	}
	if err := ignoringEINTR(func() error { return unix.Linkat(fds[0], base, fds[1], base, 0) }); err != nil {
		return &os.LinkError{Op: "link", Old: l.src + "/" + rel, New: l.dst + "/" + rel, Err: err}
	}
	return nil
}

// open returns the descriptors of directory dir ("." for the roots).
func (l *linker) open(dir string) ([2]int, error) {
	if fds, ok := l.dirs[dir]; ok {
		return fds, nil
	}
	var fds [2]int
	for side, root := range []string{l.src, l.dst} {
		var fd int
		var err error
		if dir == "." {
			fd, err = openDir(unix.AT_FDCWD, root, 0)
		} else {
			parent, perr := l.open(path.Dir(dir))
			if perr != nil {
				err = perr
			} else {
				fd, err = openDir(parent[side], path.Base(dir), unix.O_NOFOLLOW)
			}
		}
		if err != nil {
			if side == 1 {
				unix.Close(fds[0])
			}
			return fds, err
		}
		fds[side] = fd
	}
	l.dirs[dir] = fds
	return fds, nil
}

func openDir(at int, name string, flags int) (int, error) {
	var fd int
	err := ignoringEINTR(func() error {
		var err error
		fd, err = unix.Openat(at, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|flags, 0)
		return err
	})
	return fd, err
}

// close closes every descriptor the linker holds.
func (l *linker) close() {
	for d, fds := range l.dirs {
		unix.Close(fds[0])
		unix.Close(fds[1])
		delete(l.dirs, d)
	}
}

func ignoringEINTR(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}

// renameNoReplace renames oldpath to newpath, failing (EEXIST) where newpath
// exists instead of replacing it: a tree merged into a layer never takes the
// place of anything there.
func renameNoReplace(oldpath, newpath string) error {
	err := ignoringEINTR(func() error {
		return unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	})
	if err == unix.EINVAL { // a file system without the flag: the layer is this install's alone
		if _, lerr := os.Lstat(newpath); lerr == nil {
			err = unix.EEXIST
		} else {
			err = ignoringEINTR(func() error { return unix.Rename(oldpath, newpath) })
		}
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}
