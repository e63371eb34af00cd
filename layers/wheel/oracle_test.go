package wheel

import (
	"bytes"

	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// pipInstall installs whl with the oracle pip into a new --target directory.
func pipInstall(t *testing.T, py, whl string) string {
	t.Helper()
	target := filepath.Join(t.TempDir(), "T")
	runPython(t, py, nil, "import runpy,sys; sys.argv=['pip']+sys.argv[1:]; runpy.run_module('pip', run_name='__main__')",
		"install", "-q", "--no-deps", "--no-compile", "--no-index", "--no-warn-script-location", "--target", target, whl)
	return target
}

// pipView maps our tree onto the paths pip --target uses: site-packages and data at
// the top, bin/ for scripts, include/python/<name>/ for headers.
func pipView(t *testing.T, tree map[string]treeFile) map[string]treeFile {
	out := map[string]treeFile{}
	for p, f := range tree {
		var q string
		switch {
		case strings.HasPrefix(p, "site-packages/"):
			q = strings.TrimPrefix(p, "site-packages/")
		case strings.HasPrefix(p, "data/"):
			q = strings.TrimPrefix(p, "data/")
		case strings.HasPrefix(p, "include/"):
			q = "include/python/" + strings.TrimPrefix(p, "include/")
		case strings.HasPrefix(p, "bin/"):
			q = p
		default:
			t.Errorf("unexpected top-level file %s", p)
			continue
		}
		if _, dup := out[q]; dup {
			t.Fatalf("test wheel maps two files to %s", q)
		}
		out[q] = f
	}
	return out
}

func pipIgnored(p string) bool {
	if !strings.Contains(p, ".dist-info/") || strings.Count(p, "/") != 1 {
		return false
	}
	switch filepath.Base(p) {
	case "INSTALLER", "RECORD", "direct_url.json":
		return true
	}
	return false
}

func firstLine(b []byte) (string, []byte) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}

// compareWithPip installs whl with pip and with Install and compares the trees.
func compareWithPip(t *testing.T, py, whl string) {
	target := pipInstall(t, py, whl)
	theirs := readTree(t, target)
	opts := InstallOptions{Requested: true, PythonVersion: pythonXY(t, py)}
	dest, inst := installT(t, whl, opts)
	ours := pipView(t, readTree(t, dest))
	for p := range theirs {
		if pipIgnored(p) {
			delete(theirs, p)
		}
	}
	for p := range ours {
		if pipIgnored(p) {
			delete(ours, p)
		}
	}
	if a, b := strings.Join(keys(ours), "\n"), strings.Join(keys(theirs), "\n"); a != b {
		t.Fatalf("file sets differ\nours:\n%s\n\npip:\n%s", a, b)
	}
	for p, o := range ours {
		th := theirs[p]
		if strings.HasPrefix(p, "bin/") {
			if o.mode.Perm() != 0o755 {
				t.Errorf("%s: mode %v, want 0755", p, o.mode)
			}
			ol, orest := firstLine(o.data)
			tl, trest := firstLine(th.data)
			if ol == opts.withDefaultsT(t).ScriptShebang {
				if !strings.HasPrefix(tl, "#!/") || !strings.Contains(tl, "python") || !bytes.Equal(orest, trest) {
					t.Errorf("%s: script differs from pip's\nours:\n%q\npip:\n%q", p, o.data, th.data)
				}
				continue
			}
		} else if o.mode.Perm()&0o111 != th.mode.Perm()&0o111 || o.mode.Perm() != 0o644 && o.mode.Perm() != 0o755 {
			t.Errorf("%s: mode %v, pip %v", p, o.mode, th.mode)
		}
		if !bytes.Equal(o.data, th.data) {
			t.Errorf("%s: content differs from pip's (%d vs %d bytes)", p, len(o.data), len(th.data))
		}
	}
	checkRecord(t, py, dest, inst)
}

func (o InstallOptions) withDefaultsT(t *testing.T) InstallOptions {
	o, err := o.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func pythonXY(t *testing.T, py string) string {
	return strings.TrimSpace(string(runPython(t, py, nil, "import sys; print('%d.%d' % sys.version_info[:2])")))
}

// checkRecord has Python's csv module read our RECORD: every file of the tree is listed
// once with its digest and size (RECORD itself without), and csv.writer reproduces the
// exact bytes from the sorted rows.
const checkRecordScript = `
import base64, csv, hashlib, io, os, sys
site, di = sys.argv[1], sys.argv[2]
raw = open(os.path.join(site, di, "RECORD"), "rb").read()
rows = list(csv.reader(io.StringIO(raw.decode("utf-8"), newline="")))
buf = io.StringIO(newline="")
csv.writer(buf).writerows(sorted(rows))
assert buf.getvalue().encode() == raw, "csv.writer would write %r" % buf.getvalue()[:200]
listed = set()
for path, h, size in rows:
    full = os.path.normpath(os.path.join(site, path))
    listed.add(full)
    if path == di + "/RECORD":
        assert h == "" and size == "", (path, h, size)
        continue
    data = open(full, "rb").read()
    want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")
    assert h == want and size == str(len(data)), (path, h, want, size)
top = os.path.dirname(site)
for d, _, files in os.walk(top):
    for f in files:
        assert os.path.normpath(os.path.join(d, f)) in listed, "not in RECORD: " + os.path.join(d, f)
print(len(rows))
`

func checkRecord(t *testing.T, py, dest string, inst *Installed) {
	t.Helper()
	out := runPython(t, py, nil, checkRecordScript, filepath.Join(dest, "site-packages"), inst.DistInfo)
	if got := strings.TrimSpace(string(out)); got != itoa(inst.Files) {
		t.Errorf("RECORD has %s rows, Installed.Files = %d", got, inst.Files)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestInstallMatchesPip(t *testing.T) {
	py := python3(t)
	if v := string(runPython(t, py, nil, "import pip; print(pip.__version__)")); !strings.HasPrefix(v, "23.2") {
		t.Fatalf("the oracle must be pip 23.2, %s has %s", py, v)
	}
	for _, w := range goodWheels() {
		t.Run(w.Filename(), func(t *testing.T) {
			t.Parallel()
			compareWithPip(t, py, writeWheel(t, w))
		})
	}
	real, _ := filepath.Glob("/usr/share/python-wheels/*.whl")
	for _, want := range []string{"pip-", "setuptools-", "wheel-"} {
		found := false
		for _, r := range real {
			found = found || strings.HasPrefix(filepath.Base(r), want)
		}
		if !found {
			t.Fatalf("no %s*.whl in /usr/share/python-wheels (apt-get install python3-pip-whl python3-setuptools-whl python3-wheel-whl)", want)
		}
	}
	for _, whl := range real {
		t.Run(filepath.Base(whl), func(t *testing.T) {
			t.Parallel()
			compareWithPip(t, py, whl)
		})
	}
}
