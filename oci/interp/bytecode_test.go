package interp

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/oci"
)

// hostPython is the host's python3, resolved: the interpreter of the small prefixes
// these tests make.
func hostPython(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("the host's python3: %v", err)
	}
	if p, err = filepath.EvalSymlinks(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// pyVersion is "3.X" and the cache tag of py.
func pyVersion(t testing.TB, py string) (string, string) {
	t.Helper()
	out, err := exec.Command(py, "-I", "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2], sys.implementation.cache_tag)").Output()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(out))
	return f[0], f[1]
}

// pycHeader returns a .pyc's flags word (PEP 552).
func pycFlags(t testing.TB, b []byte) uint32 {
	t.Helper()
	if len(b) < 16 {
		t.Fatalf("a .pyc of %d bytes", len(b))
	}
	return binary.LittleEndian.Uint32(b[4:8])
}

// debianLike makes a prefix laid out as Debian's: bin/python3 (the host's, by an
// absolute symlink: only run here, never packed) and a stdlib without .pyc, but for
// one hash-based .pyc shipped and one timestamp-based, stale once packed.
func debianLike(t testing.TB) (prefix, lib, tag string, kept []byte) {
	t.Helper()
	py := hostPython(t)
	ver, tag := pyVersion(t, py)
	prefix = filepath.Join(t.TempDir(), "python")
	lib = filepath.Join(prefix, "lib", "python"+ver)
	files := map[string]string{
		"os.py":              "import sys\nsep = '/'\n",
		"json/__init__.py":   "from .decoder import x\n",
		"json/decoder.py":    "x = {'a': [1, 2.5, 'é']}\ndef f(*a, **k):\n    return a, k\n",
		"lib2to3/bad.py":     "print 'python 2'\n",
		"kept.py":            "KEPT = 1\n",
		"stale.py":           "STALE = 1\n",
		"email/__init__.py":  "",
		"email/mime/text.py": "class MIMEText: pass\n",
		"notpy.txt":          "text\n",
	}
	for rel, body := range files {
		p := filepath.Join(lib, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(prefix, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(py, filepath.Join(prefix, "bin", "python3")); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(lib, "__pycache__")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	// A .pyc header with flags 1 (unchecked hash) and one with flags 0 (timestamp), and a body.
	kept = append([]byte{1, 2, 3, 4, 1, 0, 0, 0}, bytes.Repeat([]byte{'k'}, 12)...)
	stale := append([]byte{1, 2, 3, 4, 0, 0, 0, 0}, bytes.Repeat([]byte{'s'}, 12)...)
	for name, b := range map[string][]byte{"kept." + tag + ".pyc": kept, "stale." + tag + ".pyc": stale} {
		if err := os.WriteFile(filepath.Join(cache, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return prefix, lib, tag, kept
}

// TestCompileStdlib: a prefix whose stdlib lacks .pyc gets, in a copy, an
// unchecked-hash .pyc for every .py that compiles, named for its in-sandbox path; a
// hash-based .pyc shipped is kept, a timestamp-based one replaced; the prefix is not
// written; two builds give the same bytes.
func TestCompileStdlib(t *testing.T) {
	ctx := context.Background()
	prefix, lib, tag, kept := debianLike(t)
	before := listTree(t, prefix)
	staleBefore, _ := os.ReadFile(filepath.Join(lib, "__pycache__", "stale."+tag+".pyc"))
	b, err := Compile(ctx, prefix, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if b.Dir == prefix || b.Compiled != 6 || b.Kept != 1 || b.Skipped != 1 {
		t.Errorf("Compile = %+v; want a copy, 6 compiled, 1 kept, 1 skipped", b)
	}
	if got := listTree(t, prefix); strings.Join(got, "\n") != strings.Join(before, "\n") {
		t.Errorf("the prefix changed:\n%q\nwas\n%q", got, before)
	}
	if now, _ := os.ReadFile(filepath.Join(lib, "__pycache__", "stale."+tag+".pyc")); !bytes.Equal(now, staleBefore) {
		t.Error("the prefix's own stale .pyc was written through a link")
	}
	clib := filepath.Join(b.Dir, b.Stdlib)
	want := map[string]string{ // source -> its .pyc
		"os.py": "__pycache__/os." + tag + ".pyc", "stale.py": "__pycache__/stale." + tag + ".pyc",
		"json/__init__.py": "json/__pycache__/__init__." + tag + ".pyc", "json/decoder.py": "json/__pycache__/decoder." + tag + ".pyc",
		"email/__init__.py": "email/__pycache__/__init__." + tag + ".pyc", "email/mime/text.py": "email/mime/__pycache__/text." + tag + ".pyc",
	}
	for src, pyc := range want {
		got, err := os.ReadFile(filepath.Join(clib, pyc))
		if err != nil {
			t.Errorf("%s: no .pyc: %v", src, err)
			continue
		}
		if f := pycFlags(t, got); f != 1 {
			t.Errorf("%s: flags %d, want 1 (unchecked hash)", pyc, f)
		}
		if name := MountPath + "/" + b.Stdlib + "/" + src; !bytes.Contains(got, []byte(name)) {
			t.Errorf("%s does not name %s", pyc, name)
		}
		if bytes.Contains(got, []byte(b.Dir)) || bytes.Contains(got, []byte(prefix)) {
			t.Errorf("%s names a host path", pyc)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(clib, "__pycache__", "kept."+tag+".pyc")); !bytes.Equal(got, kept) {
		t.Error("the shipped hash-based .pyc was not kept as it was")
	}
	if _, err := os.Stat(filepath.Join(clib, "lib2to3", "__pycache__", "bad."+tag+".pyc")); err == nil {
		t.Error("a source that does not compile has a .pyc")
	}

	// Again, elsewhere: the same tree, byte for byte.
	b2, err := Compile(ctx, prefix, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// The bin/python3 symlink leaves the tree (it points at the host): digest the stdlib.
	d1, err := oci.TreeDigest(ctx, clib, oci.TarTreeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d2, err := oci.TreeDigest(ctx, filepath.Join(b2.Dir, b2.Stdlib), oci.TarTreeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Errorf("two builds of one prefix: stdlib trees %s and %s", d1, d2)
	}

	// Once compiled, nothing is left to do: the prefix itself is packed.
	b3, err := Compile(ctx, b.Dir, t.TempDir())
	if err != nil || b3.Dir != b.Dir || b3.Compiled != 0 || b3.Kept != 6+1 || b3.Skipped != 1 {
		t.Errorf("Compile of a compiled prefix = %+v, %v; want it as it is", b3, err)
	}
}

// eachBlobFile calls f with the name and content of each regular file of a gzip'd tar.
func eachBlobFile(t testing.TB, blob string, f func(name string, body []byte)) error {
	t.Helper()
	file, err := os.Open(blob)
	if err != nil {
		return err
	}
	defer file.Close()
	zr, err := gzip.NewReader(file)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		f(h.Name, body)
	}
}
