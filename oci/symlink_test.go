//go:build unix

package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckSymlink(t *testing.T) {
	for _, tc := range []struct {
		name, target string
		ok           bool
	}{
		{"bin/python3", "python3.11", true},
		{"bin/python3", "../lib/libpython3.11.so.1.0", true},
		{"lib/python3.11/_sysconfigdata.py", "_sysconfigdata__x86_64-linux-gnu.py", true},
		{"a/b/c", "../../x/y", true},
		{"a/b/c", "../..", true},
		{"top", ".", true},
		{"a/b", "..", true},
		{"a/b", "...", true},
		{"top", "..", false},
		{"a/b/c", "../../..", false},
		{"a/b", "../../etc/passwd", false},
		{"bin/python3", "/usr/bin/python3.11", false},
		{"a/b", "x/../..", false}, // not clean
		{"a/b", "x/l/..", false},  // not clean: ".." after a component could follow a link out
		{"a/b", "./x", false},
		{"a/b", "x/", false},
		{"a/b", "", false},
		{"a/b", "x\x00y", false},
		{"a/b", `..\..\x`, false},
		{"a/b", "\xff", false},
		{"../a", "x", false},
		{"/a", "x", false},
		{"a//b", "x", false},
		{"", "x", false},
	} {
		err := CheckSymlink(tc.name, tc.target)
		if (err == nil) != tc.ok {
			t.Errorf("CheckSymlink(%q, %q) = %v, want ok=%v", tc.name, tc.target, err, tc.ok)
		}
	}
}

// FuzzCheckSymlink: an accepted link resolves, lexically, inside the tree.
func FuzzCheckSymlink(f *testing.F) {
	for _, s := range [][2]string{{"bin/python3", "python3.11"}, {"a/b/c", "../../x"}, {"a", ".."}, {"a/b", "x/../.."}, {"a", "/etc"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, target string) {
		if CheckSymlink(name, target) != nil {
			return
		}
		res := path.Join(path.Dir(name), target)
		if res == ".." || strings.HasPrefix(res, "../") || strings.HasPrefix(res, "/") {
			t.Fatalf("accepted %q -> %q resolves to %q", name, target, res)
		}
		leading := true
		for _, part := range strings.Split(target, "/") {
			if part != ".." {
				leading = false
			} else if !leading {
				t.Fatalf("accepted %q -> %q with a .. after a name", name, target)
			}
		}
	})
}

func tarEntries(t *testing.T, blob []byte) []string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(blob))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		e := string(h.Typeflag) + " " + h.Name + " " + os.FileMode(h.Mode).String()
		if h.Typeflag == tar.TypeSymlink {
			e += " -> " + h.Linkname
		}
		out = append(out, e)
	}
}

func TestTarTreeWithSymlinks(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	for _, d := range []string{"bin", "lib/python3.11"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "bin/python3.11"), []byte("ELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("python3.11", filepath.Join(root, "bin/python3")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../bin", filepath.Join(root, "lib/bindir")); err != nil {
		t.Fatal(err)
	}

	// TarTree (and the zero options) still refuse links.
	for _, opts := range []TarTreeOptions{{}} {
		if _, _, err := TarTreeWith(ctx, root, io.Discard, opts); !errors.Is(err, ErrUnsupportedFile) {
			t.Fatalf("zero options: %v, want ErrUnsupportedFile", err)
		}
	}
	if _, _, err := TarTree(ctx, root, io.Discard); !errors.Is(err, ErrUnsupportedFile) {
		t.Fatalf("TarTree: %v, want ErrUnsupportedFile", err)
	}

	var b1, b2 bytes.Buffer
	d1, id1, err := TarTreeWith(ctx, root, &b1, TarTreeOptions{AllowSymlinks: true})
	if err != nil {
		t.Fatal(err)
	}
	d2, id2, err := TarTreeWith(ctx, root, &b2, TarTreeOptions{AllowSymlinks: true})
	if err != nil || d1.Digest != d2.Digest || id1 != id2 || !bytes.Equal(b1.Bytes(), b2.Bytes()) {
		t.Fatalf("two tars of one tree differ (%v)", err)
	}
	got := strings.Join(tarEntries(t, b1.Bytes()), "\n")
	want := strings.Join([]string{
		"5 bin/ -rwxr-xr-x",
		"2 bin/python3 -rwxrwxrwx -> python3.11",
		"0 bin/python3.11 -rwxr-xr-x",
		"5 lib/ -rwxr-xr-x",
		"2 lib/bindir -rwxrwxrwx -> ../bin",
		"5 lib/python3.11/ -rwxr-xr-x",
	}, "\n")
	if got != want {
		t.Fatalf("entries:\n%s\nwant:\n%s", got, want)
	}

	// Links that leave the tree, or could, are refused even with AllowSymlinks.
	for _, target := range []string{"/usr/bin/python3", "../../x", "../..", "python3.11/../..", "../bin/../.."} {
		bad := filepath.Join(root, "bin/bad")
		if err := os.Symlink(target, bad); err != nil {
			t.Fatal(err)
		}
		_, _, err := TarTreeWith(ctx, root, io.Discard, TarTreeOptions{AllowSymlinks: true})
		if !errors.Is(err, ErrUnsupportedFile) || !strings.Contains(err.Error(), "bin/bad") {
			t.Errorf("link to %q: %v, want ErrUnsupportedFile naming it", target, err)
		}
		os.Remove(bad)
	}
}
