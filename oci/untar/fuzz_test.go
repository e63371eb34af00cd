package untar

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzExtract feeds arbitrary tar bytes, under each combination of options, to
// Extract: it must never panic, never write outside its root, leave nothing behind
// on error, and on success make exactly what it returns: directories, regular files
// of the sizes and sha256 it reports, no special bits, and symlinks only when allowed
// and only resolving inside the root.
func FuzzExtract(f *testing.F) {
	seeds := [][]byte{
		rawTar(f, reg("a", "1"), dir("d/"), reg("d/e", "2"), exe("d/x", "#!")),
		rawTar(f, dir("bin/"), exe("bin/python3.11", "ELF"), sym("bin/python3", "python3.11"), hard("bin/py", "bin/python3.11")),
		rawTar(f, dir("python/"), dir("python/bin/"), sym("python/lib", "bin"), reg("python/lib/x", "w")),
		rawTar(f, sym("l", "../.."), reg("../escape", "x")),
		rawTar(f, reg("a", "1"), reg("a/b", "2")),
		rawTar(f, global("comment", "x"), pax(reg("a", "1"), "SCHILY.xattr.user.x", "y")),
		rawTar(f, reg(".pylayer/x", "1"), reg("a", strings.Repeat("z", 100))),
		nil,
	}
	for _, s := range seeds {
		for _, opts := range []uint8{0, 0b1111, 0b10111} {
			f.Add(opts, s)
		}
	}
	base := f.TempDir()
	f.Fuzz(func(t *testing.T, flags uint8, raw []byte) {
		o := Options{
			Limits:        Limits{MaxEntries: 256, MaxFileBytes: 1 << 16, MaxTotalBytes: 1 << 18},
			Symlinks:      flags&1 != 0,
			Hardlinks:     flags&2 != 0,
			GlobalHeaders: flags&4 != 0,
			ReadOnly:      flags&8 != 0,
			Reserved:      []string{".pylayer"},
			Hash:          sha256.New,
		}
		if flags&16 != 0 {
			o.Under = "python"
		}
		outer, err := os.MkdirTemp(base, "outer-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(outer)
		dst := filepath.Join(outer, "root")
		entries, err := Extract(context.Background(), bytes.NewReader(raw), dst, o)
		left, _ := os.ReadDir(outer)
		if err != nil {
			if len(left) != 0 {
				t.Fatalf("error %v left %v behind", err, left)
			}
			return
		}
		if len(left) != 1 {
			t.Fatalf("wrote outside the root: %v", left)
		}
		real, err := filepath.EvalSymlinks(dst)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]Entry{}
		for i, e := range entries {
			if CheckName(e.Path) != nil || i > 0 && entries[i-1].Path >= e.Path {
				t.Fatalf("entry %q: bad or out of order", e.Path)
			}
			if first, _, _ := strings.Cut(e.Path, "/"); first == ".pylayer" {
				t.Fatalf("entry %q is under a reserved name", e.Path)
			}
			want[e.Path] = e
		}
		seen := 0
		err = filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == dst {
				return nil
			}
			rel, _ := filepath.Rel(dst, p)
			e, ok := want[filepath.ToSlash(rel)]
			if !ok {
				t.Fatalf("%s is on disk but not in the entries", rel)
			}
			seen++
			info, err := os.Lstat(p)
			if err != nil {
				return err
			}
			if info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
				t.Fatalf("%s has mode %v", rel, info.Mode())
			}
			switch {
			case info.Mode()&fs.ModeSymlink != 0:
				if !o.Symlinks || e.Kind != Symlink {
					t.Fatalf("%s is a symlink (allowed %v, entry %+v)", rel, o.Symlinks, e)
				}
				if r, err := filepath.EvalSymlinks(p); err == nil && r != real && !strings.HasPrefix(r, real+"/") {
					t.Fatalf("%s resolves to %s, outside %s", rel, r, real)
				}
			case info.IsDir():
				if e.Kind != Dir {
					t.Fatalf("%s is a directory, its entry %+v", rel, e)
				}
			case info.Mode().IsRegular():
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				h := sha256.Sum256(b)
				if e.Kind != File || info.Mode() != e.Mode || int64(len(b)) != e.Size || !bytes.Equal(h[:], e.Sum) {
					t.Fatalf("%s: mode %v, %d bytes, differs from its entry %+v", rel, info.Mode(), len(b), e)
				}
			default:
				t.Fatalf("%s is a %v", rel, info.Mode().Type())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if seen != len(want) {
			t.Fatalf("%d entries returned, %d on disk", len(want), seen)
		}
	})
}
