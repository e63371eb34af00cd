//go:build !unix

package cache

import (
	"os"
	"path/filepath"
)

// linker hardlinks the files of one tree into a layer being built, by path.
type linker struct{ src, dst string }

func newLinker(src, dst string) *linker { return &linker{src: src, dst: dst} }

func (l *linker) link(rel string) error {
	rel = filepath.FromSlash(rel)
	return os.Link(filepath.Join(l.src, rel), filepath.Join(l.dst, rel))
}

func (l *linker) close() {}

// renameNoReplace renames oldpath to newpath unless newpath exists (checked, then
// renamed: not atomic here, where installs are not concurrent-safe anyway).
func renameNoReplace(oldpath, newpath string) error {
	if _, err := os.Lstat(newpath); err == nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: os.ErrExist}
	}
	return os.Rename(oldpath, newpath)
}
