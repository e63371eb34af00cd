package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/sandbox"
)

// maxList is the most entries ListFiles returns of one directory.
const maxList = 10000

// tempPrefix names PutFile's files while they are written; ListFiles hides them.
const tempPrefix = ".pylayer-put-"

// cleanPath checks a workspace path as a client gives it: relative, slash-separated,
// no "..", no NUL. "" and "." are the workspace itself when dirOK.
func cleanPath(p string, dirOK bool) (string, error) {
	p = strings.TrimPrefix(p, "/")
	switch {
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("%w: path contains a NUL byte", broker.ErrInvalid)
	case p == "" || p == ".":
		if dirOK {
			return ".", nil
		}
		return "", fmt.Errorf("%w: a file path is required (relative to the workspace)", broker.ErrInvalid)
	case slices.Contains(strings.Split(p, "/"), ".."):
		return "", fmt.Errorf("%w: path %q: \"..\" is not allowed: paths are relative to the workspace", broker.ErrInvalid, p)
	case strings.Contains(p, "\\"):
		return "", fmt.Errorf("%w: path %q: use / to separate directories", broker.ErrInvalid, p)
	}
	return path.Clean(p), nil
}

// fsError maps an error of the workspace's os.Root to the broker's errors.
func fsError(op, p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: %w: no such file in the workspace", op, p, broker.ErrNotFound)
	case escapes(err):
		return fmt.Errorf("%s %s: %w: the path leaves the workspace (through a symbolic link)", op, p, broker.ErrInvalid)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%s %s: %w: a component of the path is not a directory", op, p, broker.ErrInvalid)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%s %s: %w: too many symbolic links", op, p, broker.ErrInvalid)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return fmt.Errorf("%s %s: %w: a name in the path is longer than the 255 bytes the file system allows", op, p, broker.ErrInvalid)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%s %s: %w: it is a directory", op, p, broker.ErrInvalid)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the path it names is a host path
	}
	return fmt.Errorf("%s %s: %w", op, p, err)
}

// escapes reports whether err is os.Root refusing a path that leaves it. os does not
// export the error, only its text.
func escapes(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// workspace opens the session's workspace, creating it on first use (owned by the
// sandbox user, which the sandbox itself also ensures).
func (m *Manager) workspace(ctx context.Context, id string) (*os.Root, string, error) {
	dir, err := m.workspaceDir(ctx, id)
	if err != nil {
		return nil, "", err
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, "", fmt.Errorf("session %s: opening its workspace: %w", id, err)
	}
	return r, dir, nil
}

// workspaceDir returns <Root>/<id>, made on first use.
func (m *Manager) workspaceDir(ctx context.Context, id string) (string, error) {
	if !validSessionID(id) {
		return "", fmt.Errorf("%w: session id %q cannot name a workspace", broker.ErrInvalid, id)
	}
	ident, err := m.identity(ctx)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(m.o.Root, id)
	switch err := os.Mkdir(dir, 0o700); {
	case err == nil:
		if m.chown {
			if err := os.Lchown(dir, ident.UID, ident.GID); err != nil {
				return "", fmt.Errorf("session %s: handing its workspace to the sandbox user: %w", id, err)
			}
		}
	case errors.Is(err, fs.ErrExist):
	default:
		return "", fmt.Errorf("session %s: creating its workspace under --sessions-dir: %w", id, err)
	}
	return dir, nil
}

// validSessionID reports whether id is safe as one path component (not hidden: <Root>/.cache is the caches').
func validSessionID(id string) bool {
	if id == "" || id[0] == '.' || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// identity is the host user the sessions run as (sandbox.HostIdentity, resolved once).
func (m *Manager) identity(ctx context.Context) (sandbox.Identity, error) {
	m.identMu.Lock()
	defer m.identMu.Unlock()
	if m.ident != nil {
		return *m.ident, nil
	}
	id, err := m.o.hostIdentity(ctx, m.o.User)
	if err != nil {
		return id, err
	}
	m.ident = &id
	m.chown = id.UID != os.Geteuid()
	return id, nil
}

func info(p string, fi fs.FileInfo) broker.FileInfo {
	t := "other"
	switch fi.Mode().Type() {
	case 0:
		t = "file"
	case fs.ModeDir:
		t = "dir"
	case fs.ModeSymlink:
		t = "symlink"
	}
	return broker.FileInfo{Name: path.Base(p), Path: p, Size: fi.Size(), Type: t, MTime: fi.ModTime().UTC()}
}

// PutFile writes body to p in the session's workspace, creating its directories. It is
// written to a temporary name beside p and renamed into place, so a reader never sees
// half a file, nor one past MaxFile (ErrTooLarge: nothing is written). A symbolic link
// at p is replaced by the file, and what it pointed to is left as it was; a directory
// at p is ErrInvalid.
func (m *Manager) PutFile(ctx context.Context, s broker.Session, p string, body io.Reader) (broker.FileInfo, error) {
	p, err := cleanPath(p, false)
	if err != nil {
		return broker.FileInfo{}, err
	}
	if strings.HasPrefix(path.Base(p), tempPrefix) {
		return broker.FileInfo{}, fmt.Errorf("%w: names starting %s are pylayer's", broker.ErrInvalid, tempPrefix)
	}
	r, _, err := m.workspace(ctx, s.ID)
	if err != nil {
		return broker.FileInfo{}, err
	}
	defer r.Close()
	ident, _ := m.identity(ctx)
	if dir := path.Dir(p); dir != "." {
		if err := m.mkdirAll(r, dir, ident); err != nil {
			return broker.FileInfo{}, fsError("creating the directories of", p, err)
		}
	}
	var b [8]byte
	rand.Read(b[:])
	tmp := path.Join(path.Dir(p), tempPrefix+hex.EncodeToString(b[:]))
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return broker.FileInfo{}, fsError("writing", p, err)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			r.Remove(tmp)
		}
	}()
	if m.chown {
		if err := f.Chown(ident.UID, ident.GID); err != nil {
			return broker.FileInfo{}, fmt.Errorf("writing %s: handing it to the sandbox user: %w", p, err)
		}
	}
	n, err := copyCtx(ctx, f, io.LimitReader(body, m.o.MaxFile+1))
	switch {
	case err != nil:
		return broker.FileInfo{}, fmt.Errorf("writing %s: %w", p, err)
	case n > m.o.MaxFile:
		return broker.FileInfo{}, fmt.Errorf("%w: %s is larger than the %d bytes a workspace file may have", broker.ErrTooLarge, p, m.o.MaxFile)
	}
	if err := f.Close(); err != nil {
		return broker.FileInfo{}, fmt.Errorf("writing %s: %w", p, err)
	}
	// The rename replaces a file or a symbolic link at p (the link itself, never what
	// it points to); a directory it cannot replace.
	if fi, err := r.Lstat(p); err == nil && fi.IsDir() {
		return broker.FileInfo{}, fmt.Errorf("writing %s: %w: it is a directory; delete it first, or write to a path inside it", p, broker.ErrInvalid)
	}
	if err := r.Rename(tmp, p); err != nil {
		r.Remove(tmp)
		done = true
		return broker.FileInfo{}, fsError("writing", p, err)
	}
	done = true
	fi, err := r.Lstat(p)
	if err != nil {
		return broker.FileInfo{}, fsError("writing", p, err)
	}
	m.o.Logger.Info("workspace file written", "session", s.ID, "size", fi.Size())
	return info(p, fi), nil
}

// mkdirAll makes dir and its parents in r, each handed to the sandbox user.
func (m *Manager) mkdirAll(r *os.Root, dir string, ident sandbox.Identity) error {
	cur := ""
	for _, c := range strings.Split(dir, "/") {
		cur = path.Join(cur, c)
		err := r.Mkdir(cur, 0o755)
		switch {
		case err == nil:
			if m.chown {
				if err := r.Lchown(cur, ident.UID, ident.GID); err != nil {
					return err
				}
			}
		case errors.Is(err, fs.ErrExist):
		default:
			return err
		}
	}
	return nil
}

// copyCtx copies src to dst until EOF, an error or the end of ctx.
func copyCtx(ctx context.Context, dst io.Writer, src io.Reader) (int64, error) {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, err := src.Read(buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// OpenFile opens the regular file p of the session's workspace. A symbolic link is
// followed only while it stays inside the workspace.
func (m *Manager) OpenFile(ctx context.Context, s broker.Session, p string) (io.ReadCloser, broker.FileInfo, error) {
	p, err := cleanPath(p, false)
	if err != nil {
		return nil, broker.FileInfo{}, err
	}
	r, _, err := m.workspace(ctx, s.ID)
	if err != nil {
		return nil, broker.FileInfo{}, err
	}
	defer r.Close()
	// A special file is refused before it is opened (opening a device may act); the
	// check on the open file below is the one that holds. O_NONBLOCK: a FIFO made
	// meanwhile opens at once (and is then refused).
	if fi, err := r.Stat(p); err == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
		return nil, broker.FileInfo{}, fmt.Errorf("reading %s: %w: it is not a regular file", p, broker.ErrInvalid)
	}
	f, err := r.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, broker.FileInfo{}, fsError("reading", p, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, broker.FileInfo{}, fsError("reading", p, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		what := "not a regular file"
		if fi.IsDir() {
			what = "a directory: list it with ?dir="
		}
		return nil, broker.FileInfo{}, fmt.Errorf("reading %s: %w: it is %s", p, broker.ErrInvalid, what)
	}
	return f, info(p, fi), nil
}

// ListFiles lists the directory dir of the session's workspace ("" is the workspace),
// sorted by name, without following symbolic links; a directory of more than maxList
// entries is ErrTooLarge.
func (m *Manager) ListFiles(ctx context.Context, s broker.Session, dir string) ([]broker.FileInfo, error) {
	dir, err := cleanPath(dir, true)
	if err != nil {
		return nil, err
	}
	r, _, err := m.workspace(ctx, s.ID)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	d, err := r.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, fsError("listing", dir, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(maxList + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fsError("listing", dir, err)
	}
	if len(names) > maxList {
		// A part of it would be an arbitrary one (directory order, not names').
		return nil, fmt.Errorf("listing %s: %w: the directory holds more than %d entries; list its subdirectories, or run ls or find in it with the shell route",
			dir, broker.ErrTooLarge, maxList)
	}
	slices.Sort(names)
	out := make([]broker.FileInfo, 0, len(names))
	for _, n := range names {
		if strings.HasPrefix(n, tempPrefix) {
			continue
		}
		p := path.Join(dir, n)
		fi, err := r.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fsError("listing", p, err)
		}
		out = append(out, info(p, fi))
	}
	return out, nil
}

// DeleteFile removes the file, symbolic link (not what it points to) or empty directory p.
func (m *Manager) DeleteFile(ctx context.Context, s broker.Session, p string) error {
	p, err := cleanPath(p, false)
	if err != nil {
		return err
	}
	r, _, err := m.workspace(ctx, s.ID)
	if err != nil {
		return err
	}
	defer r.Close()
	fi, err := r.Lstat(p)
	if err != nil {
		return fsError("deleting", p, err)
	}
	if err := r.Remove(p); err != nil {
		if fi.IsDir() && (errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST)) {
			return fmt.Errorf("deleting %s: %w: the directory is not empty; delete what it holds first", p, broker.ErrInvalid)
		}
		return fsError("deleting", p, err)
	}
	m.o.Logger.Info("workspace file deleted", "session", s.ID)
	return nil
}
