package interp

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var okTree = []tarEnt{
	{name: "python/", typ: tar.TypeDir},
	{name: "python/bin/", typ: tar.TypeDir},
	{name: "python/bin/python3.11", typ: tar.TypeReg, mode: 0o755, body: "ELF"},
	{name: "python/bin/python3", typ: tar.TypeSymlink, link: "python3.11"},
	{name: "python/lib/libpython3.11.so.1.0", typ: tar.TypeReg, body: "so"},
	{name: "python/lib/libpython3.so", typ: tar.TypeLink, link: "python/lib/libpython3.11.so.1.0"},
}

func with(extra ...tarEnt) []tarEnt { return append(append([]tarEnt{}, okTree...), extra...) }

func TestExtract(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "p")
	if err := extract(context.Background(), bytes.NewReader(mkTarGz(t, okTree)), dst, DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(listTree(t, dst), " ")
	want := ". bin/ bin/python3.11 bin/python3@python3.11 lib/ lib/libpython3.11.so.1.0 lib/libpython3.so"
	if got != "./ "+strings.TrimPrefix(want, ". ") {
		t.Errorf("tree %q", got)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "bin/python3.11")); fi == nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode of the interpreter: %v", fi)
	}
}

func TestExtractRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		ents []tarEnt
		lim  Limits
		want string
	}{
		{"dotdot", with(tarEnt{name: "python/../evil", typ: tar.TypeReg}), Limits{}, `".."`},
		{"dotdot deep", with(tarEnt{name: "python/bin/../../evil", typ: tar.TypeReg}), Limits{}, `".."`},
		{"absolute", with(tarEnt{name: "/etc/evil", typ: tar.TypeReg}), Limits{}, "absolute"},
		{"outside top", with(tarEnt{name: "other/x", typ: tar.TypeReg}), Limits{}, "outside python/"},
		{"unclean", with(tarEnt{name: "python/./x", typ: tar.TypeReg}), Limits{}, "not clean"},
		{"absolute link", with(tarEnt{name: "python/bin/sh", typ: tar.TypeSymlink, link: "/bin/sh"}), Limits{}, "absolute"},
		{"escaping link", with(tarEnt{name: "python/bin/up", typ: tar.TypeSymlink, link: "../../etc"}), Limits{}, "leaves the tree"},
		{"sneaky link", with(tarEnt{name: "python/bin/up", typ: tar.TypeSymlink, link: "python3/../.."}), Limits{}, "not clean"},
		{"write through link", with(tarEnt{name: "python/lnk", typ: tar.TypeSymlink, link: "bin"}, tarEnt{name: "python/lnk/x", typ: tar.TypeReg}), Limits{}, "not a directory"},
		{"hardlink outside", with(tarEnt{name: "python/h", typ: tar.TypeLink, link: "/etc/passwd"}), Limits{}, "hardlink"},
		{"hardlink to link", with(tarEnt{name: "python/h", typ: tar.TypeLink, link: "python/bin/python3"}), Limits{}, "not a regular file"},
		{"hardlink forward", with(tarEnt{name: "python/h", typ: tar.TypeLink, link: "python/later"}), Limits{}, "not a regular file"},
		{"device", with(tarEnt{name: "python/dev", typ: tar.TypeChar}), Limits{}, "entry type"},
		{"fifo", with(tarEnt{name: "python/fifo", typ: tar.TypeFifo}), Limits{}, "entry type"},
		{"setuid", with(tarEnt{name: "python/bin/su", typ: tar.TypeReg, mode: 0o4755}), Limits{}, "setuid"},
		{"duplicate", with(tarEnt{name: "python/bin/python3.11", typ: tar.TypeReg}), Limits{}, "duplicate"},
		{"file over dir", with(tarEnt{name: "python/bin", typ: tar.TypeReg}), Limits{}, "duplicate"},
		{"top is a file", []tarEnt{{name: "python", typ: tar.TypeReg}}, Limits{}, "must be a directory"},
		{"no bin", []tarEnt{{name: "python/lib/x", typ: tar.TypeReg}}, Limits{}, "install_only"},
		{"empty", nil, Limits{}, "no entries"},
		{"too many", okTree, Limits{MaxEntries: 3, MaxFileBytes: 100, MaxTotalBytes: 100}, "entries"},
		{"file too big", okTree, Limits{MaxEntries: 10, MaxFileBytes: 2, MaxTotalBytes: 100}, "per file"},
		{"total too big", okTree, Limits{MaxEntries: 10, MaxFileBytes: 100, MaxTotalBytes: 4}, "exceed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := tc.lim
			if lim == (Limits{}) {
				lim = DefaultLimits()
			}
			dst := filepath.Join(t.TempDir(), "p")
			err := extract(context.Background(), bytes.NewReader(mkTarGz(t, tc.ents)), dst, lim)
			if !errors.Is(err, ErrUnsafeTarball) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrUnsafeTarball mentioning %q", err, tc.want)
			}
			if _, serr := os.Lstat(dst); serr == nil {
				t.Error("a refused tarball left its directory behind")
			}
		})
	}
	if err := extract(context.Background(), strings.NewReader("not gzip"), filepath.Join(t.TempDir(), "p"), DefaultLimits()); !errors.Is(err, ErrUnsafeTarball) {
		t.Errorf("not gzip: %v", err)
	}
}

// TestArtifactRefusesTarball: through the public entry point, a hostile tarball is an
// error wrapping ErrUnsafeTarball and leaves nothing in the work directory.
func TestArtifactRefusesTarball(t *testing.T) {
	for name, ent := range map[string]tarEnt{
		"dotdot":        {name: "python/../x", typ: tar.TypeReg},
		"absolute":      {name: "/x", typ: tar.TypeReg},
		"escaping link": {name: "python/lib/x", typ: tar.TypeSymlink, link: "../../../etc/passwd"},
	} {
		dir := t.TempDir()
		tarball := filepath.Join(dir, "bad.tar.gz")
		if err := os.WriteFile(tarball, mkTarGz(t, with(ent)), 0o644); err != nil {
			t.Fatal(err)
		}
		work := t.TempDir()
		_, _, err := Artifact(context.Background(), tarball, work)
		if !errors.Is(err, ErrUnsafeTarball) {
			t.Errorf("%s: %v, want ErrUnsafeTarball", name, err)
		}
		if left, _ := os.ReadDir(work); len(left) != 0 {
			t.Errorf("%s: work directory keeps %v", name, left)
		}
	}
	if _, _, err := Artifact(context.Background(), "/etc/passwd", t.TempDir()); err == nil {
		t.Error("a plain file was accepted")
	}
	if _, _, err := Artifact(context.Background(), debianPrefix(t), filepath.Join(debianPrefix(t), "lib")); err == nil {
		t.Error("a work directory inside the prefix was accepted")
	}
}

// FuzzExtract: unpacking arbitrary tar bytes never panics, and whatever unpacks holds
// only directories, regular files and links that resolve inside the tree.
func FuzzExtract(f *testing.F) {
	f.Add(rawTar(f, okTree))
	f.Add(rawTar(f, with(tarEnt{name: "python/../x", typ: tar.TypeReg})))
	f.Add(rawTar(f, with(tarEnt{name: "python/l", typ: tar.TypeSymlink, link: "../.."})))
	f.Add(rawTar(f, with(tarEnt{name: "python/l", typ: tar.TypeSymlink, link: "bin"}, tarEnt{name: "python/l/x", typ: tar.TypeReg})))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		dst := filepath.Join(t.TempDir(), "p")
		lim := Limits{MaxEntries: 64, MaxFileBytes: 1 << 16, MaxTotalBytes: 1 << 18}
		if err := extract(context.Background(), bytes.NewReader(gz(t, raw)), dst, lim); err != nil {
			return
		}
		real, err := filepath.EvalSymlinks(dst)
		if err != nil {
			t.Fatal(err)
		}
		err = filepath.Walk(dst, func(p string, info os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			if info.Mode()&os.ModeSymlink != 0 {
				if r, err := filepath.EvalSymlinks(p); err == nil && r != real && !strings.HasPrefix(r, real+"/") {
					t.Fatalf("%s resolves to %s, outside %s", p, r, real)
				}
				return nil
			}
			if !info.IsDir() && !info.Mode().IsRegular() || info.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
				t.Fatalf("%s has mode %v", p, info.Mode())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
