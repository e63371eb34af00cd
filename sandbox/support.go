package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/pylayer/pylayer/internal/fsx"
)

// The support tree holds the files every sandbox gets from pylayer itself: the pip
// shim, the guard (pip refusal and sitecustomize) and /etc/passwd and /etc/group.
// With Spec.Support set, Run writes it once per content into that host directory and
// each sandbox binds it read-only at supportMount, with symlinks to it from
// ShimBinDir, guardDir, /etc/passwd and /etc/group: one bind where there were five
// --ro-bind-data (each a file bwrap writes and one more mount, whose mount table it
// reads again) and seven symlinks, about 1 ms of every session start.
//
// The tree's name is the hash of its content, so a pylayer with other files uses
// another tree and never sees a half-written one: it is written under a temporary
// name, synced, and renamed into place. It is trusted like the layers beside it in
// the host cache: it must be a directory the running user owns that nobody else may
// write.
const supportMount = "/opt/pylayer/support"

// supportEntry is one file or symlink of the support tree, by its slash path in it.
type supportEntry struct {
	name string
	mode fs.FileMode // of a file
	data []byte      // of a file
	link string      // a symlink's target, relative
	dir  bool        // an empty directory (a mount point)
}

func supportEntries() []supportEntry {
	es := []supportEntry{{name: "bin/pip", mode: 0o555, data: pipShim}}
	for _, n := range pipNames[1:] {
		es = append(es, supportEntry{name: "bin/" + n, link: "pip"})
	}
	return append(es,
		supportEntry{name: "guard/pip/__init__.py", mode: 0o444, data: pipGuard},
		supportEntry{name: "guard/sitecustomize.py", mode: 0o444, data: siteCustomize},
		supportEntry{name: "guard/__pycache__", dir: true}, // where the guard's bytecode is bound (guardpyc.go)
		supportEntry{name: "etc/passwd", mode: 0o444, data: passwdData},
		supportEntry{name: "etc/group", mode: 0o444, data: groupData})
}

// supportName is the support tree's directory name: "v1-" and the first 32 hex digits
// of the SHA-256 of every entry's name, mode, target and content.
var supportName = sync.OnceValue(func() string { return supportNameOf(supportEntries()) })

func supportNameOf(es []supportEntry) string {
	h := sha256.New()
	for _, e := range es {
		fmt.Fprintf(h, "%s\x00%o\x00%s\x00%t\x00%d\x00", e.name, e.mode, e.link, e.dir, len(e.data))
		h.Write(e.data)
	}
	return "v1-" + hex.EncodeToString(h.Sum(nil))[:32]
}

// supportPath is where the support tree lives under dir (Spec.Support).
func supportPath(dir string) string { return filepath.Join(dir, supportName()) }

// ensureSupport makes the support tree exist under dir and checks it: a directory owned
// by this process's user that no one else may write. Concurrent callers, in this
// process or others, all end with the one tree.
func ensureSupport(ctx context.Context, dir string) (string, error) {
	final := supportPath(dir)
	fi, err := os.Lstat(final)
	if errors.Is(err, fs.ErrNotExist) {
		if err = writeTree(ctx, dir, final, supportEntries()); err == nil {
			fi, err = os.Lstat(final)
		}
	}
	if err != nil {
		return "", fmt.Errorf("%w: support tree %s: %w", ErrInvalidSpec, final, err)
	}
	if err := checkTree(final, fi); err != nil {
		return "", fmt.Errorf("%w: support tree %w", ErrInvalidSpec, err)
	}
	return final, nil
}

// checkTree checks that fi, the Lstat of final, is a directory this process's user owns
// that no one else may write.
func checkTree(final string, fi fs.FileInfo) error {
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory: remove it, and pylayer writes it again", final)
	case st == nil || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s (mode %04o) must be owned by uid %d and writable by no one else: remove it, and pylayer writes it again",
			final, fi.Mode().Perm(), os.Geteuid())
	}
	return nil
}

// writeTree writes entries under a temporary name in dir, syncs them and renames the
// tree to final; when another writer got there first, its tree stays.
func writeTree(ctx context.Context, dir, final string, entries []supportEntry) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dir, ".tmp-"+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // nothing left once renamed
	dirs := []string{tmp}
	made := map[string]bool{tmp: true}
	var mkdirs func(d string) error
	mkdirs = func(d string) error {
		if made[d] {
			return nil
		}
		if err := mkdirs(filepath.Dir(d)); err != nil {
			return err
		}
		made[d] = true
		dirs = append(dirs, d)
		return os.Mkdir(d, 0o700)
	}
	for _, e := range entries {
		p := filepath.Join(tmp, filepath.FromSlash(e.name))
		if e.dir {
			if err := mkdirs(p); err != nil {
				return err
			}
			continue
		}
		if err := mkdirs(filepath.Dir(p)); err != nil {
			return err
		}
		if e.link != "" {
			if err := os.Symlink(e.link, p); err != nil {
				return err
			}
			continue
		}
		if err := writeFile(p, e.data, e.mode); err != nil {
			return err
		}
	}
	for _, d := range dirs {
		if err := os.Chmod(d, 0o755); err != nil { // whatever the umask
			return err
		}
	}
	// Durable before it is visible: one syncfs, as the cache does for its trees, where
	// an fsync of each file and directory would be a dozen.
	if err := fsx.SyncFS(ctx, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Lstat(final); serr == nil {
			return nil // another writer's tree, of the same content by its name
		}
		return err
	}
	return fsx.SyncDir(ctx, dir)
}

// writeFile creates file p with data and mode, whatever the umask.
func writeFile(p string, data []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
