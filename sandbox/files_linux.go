//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// files are the descriptors of one run: child[i] becomes descriptor 3+i of
// bwrap.
type files struct{ child []*os.File }

func (f *files) close() {
	closeAll(f.child)
	f.child = nil
}

// openFiles makes the descriptors plan describes.
func openFiles(plan []File) (_ *files, err error) {
	f := &files{}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	for _, pf := range plan {
		var c *os.File
		switch pf.Kind {
		case FileData:
			c, err = dataPipe(pf.Data)
		default:
			err = fmt.Errorf("sandbox: unknown descriptor kind %d", pf.Kind)
		}
		if err != nil {
			return nil, err
		}
		f.child = append(f.child, c)
	}
	return f, nil
}

// dataPipe returns the read end of a pipe that holds data, write end closed. Data
// that surely fits (a pipe holds at least a page) is written at once through raw
// descriptors: a blocking pipe that the runtime's poller never sees costs three system
// calls, an os.Pipe seven. More is written by a goroutine while bwrap reads.
func dataPipe(data []byte) (*os.File, error) {
	if len(data) > 4096 {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("creating a pipe for bwrap: %w", err)
		}
		go func() { w.Write(data); w.Close() }()
		return r, nil
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("creating a pipe for bwrap: %w", err)
	}
	n, err := unix.Write(p[1], data)
	if err == nil && n != len(data) {
		err = io.ErrShortWrite
	}
	if cerr := unix.Close(p[1]); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Close(p[0])
		return nil, fmt.Errorf("writing a pipe for bwrap: %w", err)
	}
	return os.NewFile(uintptr(p[0]), "bwrap-data"), nil
}

// checkWorkspace opens dir without following any symlink in any component
// (openat2 RESOLVE_NO_SYMLINKS) and checks that it is a directory owned by the
// caller or by the sandbox user. When the sandbox user is not the caller (root's
// sessions), no directory above it may let the sandbox user replace a component
// of the path — such as an earlier session's workspace, where a session could
// plant a symlink or swap a directory after this check, since bwrap resolves the
// path again — and the directory itself is handed to the sandbox user.
//
// What is left: a caller that is not root runs sessions as itself, so a session
// still running could swap a directory of its own workspace for a symlink
// between this check and bwrap's mount, if the caller names a workspace inside
// that session's workspace. Keep workspaces side by side, never nested.
func checkWorkspace(dir string, ident Identity) error {
	fd, err := openNoSymlinks(dir)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return fmt.Errorf("%w: workspace %s: a component of the path is a symbolic link or not a directory; "+
			"a workspace is bound only through real directories (pass the resolved path if you trust the link)", ErrInvalidSpec, dir)
	}
	if err != nil {
		return fmt.Errorf("%w: workspace %s: %w", ErrInvalidSpec, dir, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("workspace %s: %w", dir, err)
	}
	me := os.Geteuid()
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		err = fmt.Errorf("%w: workspace %s is not a directory", ErrInvalidSpec, dir)
	case int(st.Uid) != me && int(st.Uid) != ident.UID:
		err = fmt.Errorf("%w: workspace %s is owned by uid %d: it must be a directory you own (uid %d)", ErrInvalidSpec, dir, st.Uid, me)
	case ident.UID != me:
		if err = notWritableAbove(dir, ident); err != nil {
			break
		}
		if int(st.Uid) != ident.UID || int(st.Gid) != ident.GID {
			// The session runs as the sandbox user, which must be able to write the
			// workspace: the directory itself is handed over (what it holds is not).
			if cerr := unix.Fchownat(fd, "", ident.UID, ident.GID, unix.AT_EMPTY_PATH); cerr != nil {
				err = fmt.Errorf("workspace %s: handing it to the sandbox user %s: %w", dir, ident, cerr)
			}
		}
	}
	if err == nil && st.Mode&0o700 != 0o700 {
		err = os.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), os.FileMode(st.Mode&0o777|0o700))
	}
	return err
}

// notWritableAbove refuses a directory with an ancestor in which the sandbox
// user may replace the next component of the path: an ancestor it may write that
// is not sticky, or a sticky one (/tmp) whose next component the sandbox user
// owns.
func notWritableAbove(dir string, ident Identity) error {
	child := dir
	for p := filepath.Dir(dir); ; child, p = p, filepath.Dir(p) {
		var st, cst unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("workspace %s: %w", dir, err)
		}
		if err := unix.Lstat(child, &cst); err != nil {
			return fmt.Errorf("workspace %s: %w", dir, err)
		}
		sticky := st.Mode&unix.S_ISVTX != 0
		if may(st, ident, 0o2) && (!sticky || int(cst.Uid) == ident.UID) && child != dir {
			return fmt.Errorf("%w: workspace %s: %s above it is writable by the sandbox user %s "+
				"(an earlier session's workspace?): a session could redirect the mount; use a workspace outside it",
				ErrInvalidSpec, dir, p, ident)
		}
		if may(st, ident, 0o2) && !sticky && child == dir {
			return fmt.Errorf("%w: workspace %s: its parent %s is writable by the sandbox user %s "+
				"(an earlier session's workspace?): a session could swap the workspace for a link; use a workspace outside it",
				ErrInvalidSpec, dir, p, ident)
		}
		if p == "/" {
			return nil
		}
	}
}

// may reports whether ident has permission bit (4 read, 2 write, 1 search) on st.
func may(st unix.Stat_t, ident Identity, bit uint32) bool {
	switch {
	case int(st.Uid) == ident.UID:
		return st.Mode&(bit<<6) != 0
	case int(st.Gid) == ident.GID:
		return st.Mode&(bit<<3) != 0
	}
	return st.Mode&bit != 0
}

// checkReachable checks that the sandbox user can reach dir: bwrap runs as that
// user and resolves what it binds with that user's permissions.
func checkReachable(field, dir string, ident Identity) error {
	for p := dir; ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return fmt.Errorf("%w: %s %s: %w", ErrInvalidSpec, field, dir, err)
		}
		if !may(st, ident, 0o1) {
			return fmt.Errorf("%w: %s %s: the sandbox user %s cannot enter %s (mode %04o, owner %d): sessions started by root run as that user; "+
				"keep the cache and workspaces under directories it may enter (e.g. --cache /var/cache/pylayer, chmod o+x %s)",
				ErrInvalidSpec, field, dir, ident, p, st.Mode&0o7777, st.Uid, p)
		}
		if p == "/" {
			return nil
		}
	}
}

// openNoSymlinks opens path O_PATH|O_DIRECTORY without following a symlink in
// any component: openat2 RESOLVE_NO_SYMLINKS, or, on kernels before 5.6, one
// component at a time with O_NOFOLLOW.
func openNoSymlinks(path string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if !errors.Is(err, unix.ENOSYS) {
		return fd, err
	}
	dir, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(strings.Trim(path, "/"), "/") {
		if c == "" || c == "." || c == ".." {
			unix.Close(dir)
			return -1, unix.EINVAL
		}
		next, err := unix.Openat(dir, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(dir)
		if err != nil {
			if errors.Is(err, unix.ENOTDIR) {
				err = unix.ELOOP // a symlink opened with O_NOFOLLOW|O_DIRECTORY
			}
			return -1, err
		}
		dir = next
	}
	return dir, nil
}
