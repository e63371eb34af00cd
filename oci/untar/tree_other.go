//go:build !unix

package untar

import (
	"io/fs"
	"os"
)

// rootTree makes entries through an os.Root: every path is walked from the
// root, one component at a time, never through a symlink that leaves it.
type rootTree struct{ root *os.Root }

func openTree(dst string) (tree, error) {
	r, err := os.OpenRoot(dst)
	if err != nil {
		return nil, err
	}
	return rootTree{r}, nil
}

func (t rootTree) mkdir(name string) error            { return t.root.Mkdir(name, 0o755) }
func (t rootTree) symlink(target, name string) error  { return t.root.Symlink(target, name) }
func (t rootTree) link(oldname, newname string) error { return t.root.Link(oldname, newname) }
func (t rootTree) close()                             { t.root.Close() }

func (t rootTree) create(name string, _ fs.FileMode) (file, error) {
	f, err := t.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

type osFile struct{ *os.File }

func (f osFile) finish(mode fs.FileMode) error {
	err := f.Chmod(mode) // not OpenFile's mode: the umask may have narrowed it
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (f osFile) abort() { f.Close() }
