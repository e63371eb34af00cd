package wheel

import (
	"bytes"
	"encoding/binary"
	"os"
	"path"
	"reflect"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/test/fixture"
)

func pycWheel() fixture.Wheel {
	for _, w := range goodWheels() {
		if w.Name == "py2files" {
			w.Files = append(w.Files,
				fixture.File{Path: "py2files/boom.py", Data: []byte("def boom():\n    raise ValueError('boom')\n")},
				fixture.File{Path: "py2files-1.0.data/purelib/py2extra.py", Data: []byte("E = frozenset({'p', 'q', 'r', 's'})\n")},
			)
			return w
		}
	}
	panic("no py2files wheel")
}

func TestInstallCompilesPyc(t *testing.T) {
	interp := compileInterpreter(t)
	whl := writeWheel(t, pycWheel())
	opts := InstallOptions{Interpreter: interp}
	dest, inst := installT(t, whl, opts)
	if want := []string{"py2files/tests/py2only.py"}; !reflect.DeepEqual(inst.PycSkipped, want) {
		t.Errorf("PycSkipped = %v, want %v", inst.PycSkipped, want)
	}
	tree := readTree(t, dest)
	var pycs []string
	for p, f := range tree {
		if !strings.HasSuffix(p, ".pyc") {
			continue
		}
		pycs = append(pycs, p)
		if f.mode.Perm() != 0o644 {
			t.Errorf("%s: mode %v", p, f.mode)
		}
		if flags := binary.LittleEndian.Uint32(f.data[4:8]); flags != 0b01 {
			t.Errorf("%s: header flags %#b, want 0b01 (unchecked hash)", p, flags)
		}
	}
	want := []string{
		"site-packages/py2extra.py", "site-packages/py2files/__init__.py", "site-packages/py2files/boom.py", "site-packages/py2files/sets.py",
	}
	for _, w := range want {
		pyc := path.Join(path.Dir(w), "__pycache__", strings.TrimSuffix(path.Base(w), ".py")+".cpython-311.pyc")
		if _, ok := tree[pyc]; !ok {
			t.Errorf("no %s; have %v", pyc, pycs)
		}
	}
	if len(pycs) != len(want) {
		t.Errorf("pyc files %v", pycs)
	}
	checkRecord(t, python3(t), dest, inst)

	// Imports use the unchecked .pyc (a changed source is not even looked at), and the
	// code's file name is the in-sandbox path. A normal import from the host path would
	// let importlib rewrite co_filename to that path, so the .pyc is also loaded on its
	// own, as from a read-only tree mounted at SitePackagesDir.
	out := runPython(t, interp, nil, `
import importlib.machinery, importlib.util, sys, traceback
site = sys.argv[1]
sys.path.insert(0, site)
sys.dont_write_bytecode = True
with open(site + "/py2files/sets.py", "a") as f:
    f.write("raise SystemExit('the source ran, not the pyc')\n")
import py2files.sets, py2extra
print(py2files.sets.f('c'), sorted(py2extra.E))
loader = importlib.machinery.SourcelessFileLoader("boom", importlib.util.cache_from_source(site + "/py2files/boom.py"))
mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("boom", loader))
loader.exec_module(mod)
print(mod.boom.__code__.co_filename)
try:
    mod.boom()
except ValueError:
    print(traceback.format_exc().strip().splitlines()[-2].strip())
`, dest+"/site-packages")
	wantOut := "True ['p', 'q', 'r', 's']\n" + DefaultSitePackagesDir + "/py2files/boom.py\n" +
		`File "` + DefaultSitePackagesDir + `/py2files/boom.py", line 2, in boom` + "\n"
	if string(out) != wantOut {
		t.Errorf("python says:\n%s\nwant:\n%s", out, wantOut)
	}

	// Same wheel, same options: same bytes, every time.
	for i := 0; i < 3; i++ {
		again, _ := installT(t, whl, opts)
		tree2 := readTree(t, again)
		for p, f := range tree {
			if !bytes.Equal(f.data, tree2[p].data) {
				t.Errorf("install %d: %s differs", i+2, p)
			}
		}
	}
}

func TestInstallPycBadInterpreter(t *testing.T) {
	whl := writeWheel(t, pycWheel())
	dest := t.TempDir() + "/tree"
	if _, err := Install(t.Context(), whl, dest, InstallOptions{Interpreter: "/nonexistent/python3"}); err == nil {
		t.Fatal("no error")
	}
	assertNothingLeft(t, dest)
}

// TestPycReproducibleAcrossRuns compiles a set constant with every interpreter at hand:
// before 3.11, marshal wrote sets in hash order, so bytes depend on PYTHONHASHSEED
// reaching the interpreter (which -I and -E would prevent).
func TestPycReproducibleAcrossRuns(t *testing.T) {
	interps := []string{compileInterpreter(t)}
	for _, p := range []string{"/root/.pyenv/versions/3.10.13/bin/python3.10", "/root/.pyenv/versions/3.9.18/bin/python3.9"} {
		if _, err := os.Stat(p); err == nil {
			interps = append(interps, p)
		}
	}
	whl := writeWheel(t, pycWheel())
	for _, interp := range interps {
		var first map[string]treeFile
		for i := 0; i < 4; i++ {
			dest, _ := installT(t, whl, InstallOptions{Interpreter: interp})
			tree := readTree(t, dest)
			if first == nil {
				first = tree
				continue
			}
			for p, f := range first {
				if !bytes.Equal(f.data, tree[p].data) {
					t.Errorf("%s: run %d: %s differs", interp, i+1, p)
				}
			}
		}
	}
}

// TestEncodeReq: a request is one line of NUL-separated UTF-8 fields, and a path that
// could not be read back as one (a NUL, a newline, bytes that are not UTF-8) is refused
// with an error naming it, before anything reaches the interpreter.
func TestEncodeReq(t *testing.T) {
	b, err := encodeReq(compileReq{Root: "/t/site", Prefix: "/opt/p", Files: []string{"a/b.py", "é.py"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "/t/site\x00/opt/p\x00a/b.py\x00é.py\n"; string(b) != want {
		t.Errorf("encodeReq = %q, want %q", b, want)
	}
	if b, err := encodeReq(compileReq{Root: "/t", Prefix: "/p"}); err != nil || string(b) != "/t\x00/p\n" {
		t.Errorf("no files: %q, %v", b, err)
	}
	if _, err := encodeReq(compileReq{Root: "t/site", Prefix: "/p"}); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Errorf("a relative root: err = %v, want a refusal", err)
	}
	for _, bad := range []compileReq{
		{Root: "/t", Prefix: "/p", Files: []string{"a\x00b.py"}},
		{Root: "/t", Prefix: "/p", Files: []string{"a\nb.py"}},
		{Root: "/t\n", Prefix: "/p"},
		{Root: "/t", Prefix: "/p\x00"},
		{Root: "/t", Prefix: "/p", Files: []string{"\xff.py"}},
	} {
		if _, err := encodeReq(bad); err == nil || !strings.Contains(err.Error(), "NUL or a newline, or is not UTF-8") {
			t.Errorf("encodeReq(%q) err = %v, want a refusal", bad, err)
		}
	}
}
