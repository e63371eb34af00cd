//go:build unix

package untar

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// maxOpenDirs bounds the directory descriptors one extraction keeps open. Tar
// entries come mostly grouped by directory, so a small cache serves nearly
// every entry; past the bound all are closed and reopened as needed.
const maxOpenDirs = 64

// fdTree makes entries relative to descriptors of the directories it made:
// one openat per file, where a path walk (os.Root) costs an openat and a close
// per component. Every directory is opened O_NOFOLLOW|O_DIRECTORY from its
// parent's descriptor, and only once the extractor made it as a directory;
// files and links are made O_EXCL/O_NOFOLLOW in that directory, so nothing is
// ever resolved through a symlink, as with os.Root.
type fdTree struct {
	root int
	dirs map[string]int // open descriptors of directories made, by path
}

func openTree(dst string) (tree, error) {
	fd, err := retry(func() (int, error) {
		return unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dst, Err: err}
	}
	return &fdTree{root: fd, dirs: map[string]int{}}, nil
}

// retry calls f until it fails with something other than EINTR.
func retry(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}

func retry0(f func() error) error {
	_, err := retry(func() (int, error) { return 0, f() })
	return err
}

// parent returns the descriptor of the directory holding name, and name's last element.
func (t *fdTree) parent(name string) (int, string, error) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return t.root, name, nil
	}
	fd, err := t.dir(name[:i])
	return fd, name[i+1:], err
}

// dir returns a descriptor of directory p, opening it (and its parents) when
// it is not open. The bound is enforced before anything is looked up, so no
// descriptor a caller holds is closed under it.
func (t *fdTree) dir(p string) (int, error) {
	if fd, ok := t.dirs[p]; ok {
		return fd, nil
	}
	if len(t.dirs) >= maxOpenDirs {
		t.closeDirs()
	}
	pfd, base, err := t.parent(p)
	if err != nil {
		return -1, err
	}
	fd, err := retry(func() (int, error) {
		return unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return -1, &fs.PathError{Op: "openat", Path: p, Err: err}
	}
	t.dirs[p] = fd
	return fd, nil
}

func (t *fdTree) closeDirs() {
	for p, fd := range t.dirs {
		unix.Close(fd)
		delete(t.dirs, p)
	}
}

func (t *fdTree) mkdir(name string) error {
	pfd, base, err := t.parent(name)
	if err != nil {
		return err
	}
	if err := retry0(func() error { return unix.Mkdirat(pfd, base, 0o755) }); err != nil {
		return &fs.PathError{Op: "mkdirat", Path: name, Err: err}
	}
	return nil
}

func (t *fdTree) symlink(target, name string) error {
	pfd, base, err := t.parent(name)
	if err != nil {
		return err
	}
	if err := retry0(func() error { return unix.Symlinkat(target, pfd, base) }); err != nil {
		return &fs.PathError{Op: "symlinkat", Path: name, Err: err}
	}
	return nil
}

func (t *fdTree) link(oldname, newname string) error {
	ofd, obase, err := t.parent(oldname)
	if err != nil {
		return err
	}
	// Resolving newname's directory may close ofd (the bound): hold a copy.
	ofd, err = retry(func() (int, error) { return unix.Dup(ofd) })
	if err != nil {
		return &fs.PathError{Op: "dup", Path: oldname, Err: err}
	}
	defer unix.Close(ofd)
	nfd, nbase, err := t.parent(newname)
	if err != nil {
		return err
	}
	if err := retry0(func() error { return unix.Linkat(ofd, obase, nfd, nbase, 0) }); err != nil {
		return &fs.PathError{Op: "linkat", Path: newname, Err: err}
	}
	return nil
}

// create makes the file with its final mode when the umask cannot narrow it
// (it is opened for writing all the same), which saves an fchmod per file;
// otherwise 0600, and finish sets the mode.
func (t *fdTree) create(name string, mode fs.FileMode) (file, error) {
	pfd, base, err := t.parent(name)
	if err != nil {
		return nil, err
	}
	perm, chmod := uint32(0o600), true
	if u, ok := umask(); ok && uint32(mode.Perm())&u == 0 {
		perm, chmod = uint32(mode.Perm()), false
	}
	fd, err := retry(func() (int, error) {
		return unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	})
	if err != nil {
		return nil, &fs.PathError{Op: "openat", Path: name, Err: err}
	}
	return &fdFile{fd: fd, name: name, chmod: chmod}, nil
}

// umask is the process's file mode creation mask, as Linux reports it in
// /proc/self/status (read once: pylayer never changes it); ok is false where
// it cannot be read without changing it.
var umask = sync.OnceValues(func() (uint32, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			u, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			return uint32(u), err == nil && u <= 0o777
		}
	}
	return 0, false
})

func (t *fdTree) close() {
	t.closeDirs()
	unix.Close(t.root)
}

// fdFile is a file being written through its raw descriptor: no poller
// registration, no flag juggling, one write(2) per chunk.
type fdFile struct {
	fd    int
	name  string
	chmod bool // created with another mode than its final one
}

func (f *fdFile) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := retry(func() (int, error) { return unix.Write(f.fd, b[n:]) })
		if err != nil {
			return n, &fs.PathError{Op: "write", Path: f.name, Err: err}
		}
		n += k
	}
	return n, nil
}

func (f *fdFile) finish(mode fs.FileMode) error {
	var err error
	if f.chmod {
		err = retry0(func() error { return unix.Fchmod(f.fd, uint32(mode.Perm())) })
	}
	if cerr := unix.Close(f.fd); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return &fs.PathError{Op: "fchmod", Path: f.name, Err: err}
	}
	return nil
}

func (f *fdFile) abort() { unix.Close(f.fd) }
