//go:build unix

package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestLinker links files of more directories than it keeps open, each the
// very inode of the tree, and refuses a directory that is a symlink.
func TestLinker(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	var files []string
	for d := range maxLinkDirs + 10 {
		dir := fmt.Sprintf("pkg/d%03d/sub", d)
		must(t, os.MkdirAll(filepath.Join(src, dir), 0o755))
		must(t, os.MkdirAll(filepath.Join(dst, dir), 0o755))
		for _, f := range []string{dir + "/a.py", fmt.Sprintf("pkg/d%03d/b.py", d)} {
			must(t, os.WriteFile(filepath.Join(src, f), []byte(f), 0o444))
			files = append(files, f)
		}
	}
	must(t, os.WriteFile(filepath.Join(src, "top.pth"), []byte("x"), 0o444))
	files = append(files, "top.pth")
	ln := newLinker(src, dst)
	for _, f := range files {
		if err := ln.link(f); err != nil {
			t.Fatalf("link %s: %v", f, err)
		}
	}
	if len(ln.dirs) > maxLinkDirs+4 {
		t.Errorf("linker holds %d directories open, want at most about %d", len(ln.dirs), maxLinkDirs)
	}
	ln.close()
	if len(ln.dirs) != 0 {
		t.Errorf("close left %d directories open", len(ln.dirs))
	}
	for _, f := range files {
		a, err1 := os.Lstat(filepath.Join(src, f))
		b, err2 := os.Lstat(filepath.Join(dst, f))
		if err1 != nil || err2 != nil || !os.SameFile(a, b) {
			t.Fatalf("%s: the layer's file is not the tree's (%v, %v)", f, err1, err2)
		}
	}

	// A directory of the layer replaced by a symlink is never followed.
	elsewhere := t.TempDir()
	must(t, os.Mkdir(filepath.Join(src, "evil"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "evil", "x.py"), nil, 0o444))
	must(t, os.Symlink(elsewhere, filepath.Join(dst, "evil")))
	ln = newLinker(src, dst)
	defer ln.close()
	err := ln.link("evil/x.py")
	var le *os.LinkError
	if !errors.As(err, &le) {
		t.Fatalf("linking through a symlinked directory: %v, want a *os.LinkError", err)
	}
	if _, err := os.Lstat(filepath.Join(elsewhere, "x.py")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the link went through the symlink: %v", err)
	}
	if err := ln.link("missing.py"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("linking a missing file: %v, want fs.ErrNotExist", err)
	}
}
