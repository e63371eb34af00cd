package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// TestSupportTree: ensureSupport writes every entry with its mode, whatever the umask,
// under the name of its content, and leaves nothing else behind, however many callers
// race; a second call changes nothing.
func TestSupportTree(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "sandbox")
	var wg sync.WaitGroup
	paths := make([]string, 16)
	errs := make([]error, len(paths))
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], errs[i] = ensureSupport(context.Background(), dir)
		}()
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != supportPath(dir) {
			t.Fatalf("caller %d: %q, %v; want %q", i, paths[i], errs[i], supportPath(dir))
		}
	}
	names, err := os.ReadDir(dir)
	if err != nil || len(names) != 1 || names[0].Name() != supportName() {
		t.Fatalf("%s holds %v (%v), want only %s", dir, names, err, supportName())
	}
	root := supportPath(dir)
	for _, e := range supportEntries() {
		p := filepath.Join(root, e.name)
		if e.dir {
			if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
				t.Errorf("%s: %v, want a directory", e.name, err)
			}
			continue
		}
		if e.link != "" {
			if got, err := os.Readlink(p); err != nil || got != e.link {
				t.Errorf("%s -> %q (%v), want -> %q", e.name, got, err, e.link)
			}
			continue
		}
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		if fi.Mode() != e.mode || string(b) != string(e.data) {
			t.Errorf("%s: mode %v, %d bytes; want %v, %d bytes", e.name, fi.Mode(), len(b), e.mode, len(e.data))
		}
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			fi, _ := d.Info()
			if fi.Mode().Perm() != 0o755 {
				t.Errorf("%s: mode %v, want 0755 (the sandbox user enters it)", p, fi.Mode())
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := ensureSupport(context.Background(), dir); err != nil || p != root {
		t.Fatalf("second call: %q, %v", p, err)
	}
}

// TestSupportName: the name changes with any part of any entry.
func TestSupportName(t *testing.T) {
	base := supportEntries()
	seen := map[string]string{supportNameOf(base): "as built"}
	if !strings.HasPrefix(supportName(), "v1-") || len(supportName()) != 35 || supportName() != supportNameOf(base) {
		t.Fatalf("supportName() = %q", supportName())
	}
	for what, change := range map[string]func([]supportEntry){
		"name":    func(es []supportEntry) { es[0].name = "bin/pip0" },
		"mode":    func(es []supportEntry) { es[0].mode = 0o755 },
		"content": func(es []supportEntry) { es[len(es)-1].data = append(slices.Clone(es[len(es)-1].data), 'x') },
		"link":    func(es []supportEntry) { es[1].link = "pip3" },
		"entries": func(es []supportEntry) {},
	} {
		es := slices.Clone(base)
		change(es)
		if what == "entries" {
			es = es[1:]
		}
		n := supportNameOf(es)
		if prev, ok := seen[n]; ok {
			t.Errorf("changing the %s gives the name of %s: %s", what, prev, n)
		}
		seen[n] = what
	}
}

// TestSupportRefused: a support tree that is not a directory, or that others may write,
// is refused with what to do, and never used.
func TestSupportRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		make func(p string) error
		want string
	}{
		{"a file", func(p string) error { return os.WriteFile(p, nil, 0o644) }, "not a directory: remove it"},
		{"group-writable", func(p string) error {
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			return os.Chmod(p, 0o775)
		}, "writable by no one else"},
		{"a symlink", func(p string) error { return os.Symlink(t.TempDir(), p) }, "not a directory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tt.make(supportPath(dir)); err != nil {
				t.Fatal(err)
			}
			_, err := ensureSupport(context.Background(), dir)
			if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalidSpec saying %q", err, tt.want)
			}
		})
	}
}

// TestArgvSupport: with a support tree, bwrap gets no data file but the seccomp
// program, one bind of the tree and the symlinks to it.
func TestArgvSupport(t *testing.T) {
	p, err := Build("/usr/bin/bwrap", Spec{Command: []string{"true"}, Support: "/var/cache/pylayer/sandbox"})
	if err != nil {
		t.Fatal(err)
	}
	a := strings.Join(p.Args, " ")
	if strings.Contains(a, "--ro-bind-data") {
		t.Errorf("argv binds data files: %s", a)
	}
	for _, want := range []string{
		"--ro-bind /var/cache/pylayer/sandbox/" + supportName() + " " + supportMount,
		"--symlink support/bin " + ShimBinDir, "--symlink support/guard " + guardDir,
		"--symlink " + supportMount + "/etc/passwd /etc/passwd", "--symlink " + supportMount + "/etc/group /etc/group",
	} {
		if !strings.Contains(a, want) {
			t.Errorf("argv lacks %q: %s", want, a)
		}
	}
	if n := len(p.Files); n > 1 {
		t.Errorf("%d descriptors, want at most the seccomp program", n)
	}
	if _, err := Build("/usr/bin/bwrap", Spec{Command: []string{"true"}, Support: "rel/dir"}); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("a relative support directory: %v, want ErrInvalidSpec", err)
	}
}
