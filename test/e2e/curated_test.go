package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/test/fixture"
)

var (
	curatedOnce sync.Once
	curatedDir  string
	curatedErr  error
)

// curatedIndex writes the curated base (fixture.RepackCurated: Debian's packages repacked
// as upstream ships them, shared libraries vendored) once per test binary and returns the
// directory.
func curatedIndex(ctx context.Context, t testing.TB) string {
	t.Helper()
	curatedOnce.Do(func() {
		curatedDir = filepath.Join(scratch, "curated-index")
		if curatedErr = os.MkdirAll(curatedDir, 0o755); curatedErr == nil {
			_, curatedErr = fixture.RepackCurated(ctx, debCache(), curatedDir)
		}
	})
	if curatedErr != nil {
		t.Fatal(curatedErr)
	}
	return curatedDir
}

// curatedDeploy is the curated base published on the Debian interpreter artifact.
type curatedDeploy struct {
	url      string    // the index serving the curated wheels
	py, base published // the interpreter and the base layer
}

// publishCurated serves the curated wheels, publishes the interpreter (with pyExtra, e.g.
// --tag python-current), locks the curated requirements for it and publishes the base
// built with .pyc by that interpreter (with baseExtra, e.g. --tag current), into repo.
func publishCurated(ctx context.Context, t *testing.T, h *host, repo, priv, pub string, pyExtra, baseExtra []string) curatedDeploy {
	t.Helper()
	c := curatedDeploy{url: serveIndex(t, curatedIndex(ctx, t))}
	c.py = publishInterpreter(ctx, t, h, repo, priv, pyExtra...)
	lockPath := filepath.Join(h.home, "curated.lock.json")
	h.must(ctx, t, append(append([]string{"lock"}, curatedRequirements...), "--index-url", c.url, "--python-from", c.py.Ref, "--trust", pub, "-o", lockPath)...)
	out := h.must(ctx, t, append([]string{"publish", lockPath, "--repo", repo, "--key", priv, "--index-url", c.url, "--interpreter", pythonPrefix(t), "--json"}, baseExtra...)...)
	if err := json.Unmarshal([]byte(out), &c.base); err != nil {
		t.Fatalf("pylayer publish --json: %v", err)
	}
	return c
}

// curatedRequirements are what the design's curated base names (python-pptx and
// pdfplumber are not in Debian 12; pdfminer.six, which pdfplumber is built on, is).
var curatedRequirements = []string{"python-docx", "openpyxl", "xlsxwriter", "lxml", "pillow", "numpy", "matplotlib",
	"pypdf", "reportlab", "markdown", "pdfminer.six"}

// curatedScript is what an agent does with the curated base in one session: numbers, a
// chart, an image, a PDF report read back two ways, markdown, a docx and an xlsx with the
// chart, XML; then it reports where its modules and native libraries came from.
const curatedScript = `
import json, os, sys
import numpy as np
a = np.arange(12.0).reshape(3, 4)
assert float((a @ a.T).trace()) == 506.0, (a @ a.T).trace()
assert np.allclose(np.linalg.inv(np.array([[2.0, 1.0], [1.0, 3.0]])) @ np.array([[2.0, 1.0], [1.0, 3.0]]), np.eye(2))

import matplotlib
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(4, 3))
ax.plot([1, 2, 3, 4], [1, 4, 9, 16], label="squares")
ax.set_title("pylayer chart")
ax.legend()
fig.savefig("/workspace/chart.png", dpi=80)
plt.close(fig)

from PIL import Image
with Image.open("/workspace/chart.png") as im:
    assert im.size == (320, 240), im.size
    im.resize((160, 120)).save("/workspace/chart-small.png")
with Image.open("/workspace/chart-small.png") as im:
    assert im.size == (160, 120), im.size

from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas
c = canvas.Canvas("/workspace/report.pdf", pagesize=A4)
c.drawString(72, 760, "pylayer curated report")
c.drawImage("/workspace/chart.png", 72, 400, width=320, height=240)
c.showPage()
c.save()
import pypdf
reader = pypdf.PdfReader("/workspace/report.pdf")
assert len(reader.pages) == 1 and "pylayer curated report" in reader.pages[0].extract_text()
from pdfminer.high_level import extract_text
assert "pylayer curated report" in extract_text("/workspace/report.pdf")

import markdown
assert markdown.markdown("# Report\n\n*ok*") == "<h1>Report</h1>\n<p><em>ok</em></p>"

import docx
from docx.shared import Inches
d = docx.Document()
d.add_heading("Report", 1)
d.add_picture("/workspace/chart.png", width=Inches(4))
d.save("/workspace/report.docx")
assert len(docx.Document("/workspace/report.docx").inline_shapes) == 1

import openpyxl
from openpyxl.drawing.image import Image as XLImage
wb = openpyxl.Workbook()
wb.active["A1"] = 42
wb.active.add_image(XLImage("/workspace/chart-small.png"), "C3")
wb.save("/workspace/book.xlsx")
assert openpyxl.load_workbook("/workspace/book.xlsx").active["A1"].value == 42

from lxml import etree
assert etree.fromstring(b"<a><b>1</b></a>").findtext("b") == "1"

import cryptography.hazmat.bindings._rust
mods = {m.__name__: m.__file__ for m in (np, matplotlib, Image, pypdf, docx, openpyxl, etree, markdown, canvas)}
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if ".so" in l.split()[-1]})
print(json.dumps({"modules": mods, "libs": libs, "mpl_data": matplotlib.get_data_path(), "rc": matplotlib.matplotlib_fname()}))
`

// wheelLibs are shared libraries the curated wheels need beyond the manylinux allow-list:
// in a session they must come from the wheels' own .libs, never from the host's /usr.
var wheelLibs = []string{"libblas", "liblapack", "libopenblas", "libgfortran", "libquadmath", "libwebp", "libsharpyuv",
	"libjpeg", "libtiff", "libopenjp2", "liblcms2", "libfreetype", "libpng16", "libimagequant", "libraqm",
	"libfribidi", "libharfbuzz", "libxcb", "libqhull", "libbrotli", "libdeflate", "libjbig", "libLerc"}

// TestCuratedBase publishes the design's curated base (numpy, matplotlib, Pillow, reportlab,
// pypdf, pdfminer.six, markdown and the office set, repacked from Debian with their shared
// libraries vendored) on the Debian interpreter artifact, and in one session does what an
// agent does with it: every import works from the layer, the native libraries come from the
// wheels' .libs and not the host, nothing is printed on stderr once the session's font cache
// exists, the layer's console scripts run by name, and ensure probes it clean.
func TestCuratedBase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	h := newHost(t)
	repo := "oci:" + filepath.Join(sharedDir(t), "repo")
	priv, pub := h.keygen(ctx, t, "ci")
	c := publishCurated(ctx, t, h, repo, priv, pub, nil, nil)
	py, base := c.py, c.base
	trust := []string{"--trust", pub}
	ws, cache := sharedDir(t), sharedDir(t)
	session := func(args ...string) result {
		return h.run(ctx, t, append(append(append([]string{"run"}, trust...), "--python", py.Ref, "--layer", base.Ref,
			"--workspace", ws, "--cache-dir", cache, "--timeout", "5m", "--"), args...)...)
	}

	// The session's first run builds matplotlib's font list in the session's cache dir,
	// silently; the second finds it there.
	if r := session("python3", "-c", "import matplotlib.pyplot"); r.code != 0 || strings.TrimSpace(r.stderr) != "" {
		t.Fatalf("first import of matplotlib.pyplot: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if fonts, _ := filepath.Glob(filepath.Join(cache, "matplotlib", "fontlist-*.json")); len(fonts) != 1 {
		t.Errorf("matplotlib's font list is not in the session's cache dir: %v", fonts)
	}
	r := session("python3", "-c", curatedScript)
	if r.code != 0 {
		t.Fatalf("the curated session script: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if strings.TrimSpace(r.stderr) != "" {
		t.Errorf("the curated session printed on stderr:\n%s", r.stderr)
	}
	var rep struct {
		Modules map[string]string `json:"modules"`
		Libs    []string          `json:"libs"`
		MPLData string            `json:"mpl_data"`
		RC      string            `json:"rc"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("the script printed %q: %v", r.stdout, err)
	}
	for m, f := range rep.Modules {
		if !strings.HasPrefix(f, "/opt/pylayer/layers/") {
			t.Errorf("%s imported from %s, not from the base layer", m, f)
		}
	}
	if !strings.HasPrefix(rep.MPLData, "/opt/pylayer/layers/") || !strings.HasPrefix(rep.RC, rep.MPLData) {
		t.Errorf("matplotlib's data is %s and its matplotlibrc %s; want both inside the layer", rep.MPLData, rep.RC)
	}
	vendored := 0
	for _, lib := range rep.Libs {
		name := filepath.Base(lib)
		for _, w := range wheelLibs {
			if !strings.HasPrefix(name, w) {
				continue
			}
			if !strings.HasPrefix(lib, "/opt/pylayer/layers/") || !strings.Contains(lib, ".libs/") {
				t.Errorf("%s is loaded from %s, not from a wheel's .libs", w, lib)
			} else {
				vendored++
			}
		}
	}
	if vendored < 3 {
		t.Errorf("only %d vendored libraries loaded; want numpy's BLAS/LAPACK and Pillow's codecs among them:\n%s", vendored, strings.Join(rep.Libs, "\n"))
	}
	for _, f := range []string{"chart.png", "chart-small.png", "report.pdf", "report.docx", "book.xlsx"} {
		if fi, err := os.Stat(filepath.Join(ws, f)); err != nil || fi.Size() == 0 {
			t.Errorf("the session did not leave %s in its workspace: %v", f, err)
		}
	}

	t.Run("console scripts run by name", func(t *testing.T) {
		r := session("sh", "-c", `printf '# hi\n' | markdown_py && fonttools help >/dev/null && normalizer --version && command -v f2py`)
		if r.code != 0 || !strings.Contains(r.stdout, "<h1>hi</h1>") || !strings.Contains(r.stdout, "/opt/pylayer/layers/") {
			t.Errorf("console scripts: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("ensure probes it clean", func(t *testing.T) {
		r := h.run(ctx, t, append([]string{"--json", "ensure", "--python", py.Ref, "--base", base.Ref}, trust...)...)
		var rep ensureJSON
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("pylayer ensure --json printed %q: %v", r.stdout, err)
		}
		if !rep.OK || rep.ProbeErr != "" || len(rep.Probe.Failed) != 0 {
			t.Errorf("ensure on the curated base: %s", r.stdout)
		}
		for _, m := range []string{"numpy", "matplotlib", "PIL", "reportlab", "pypdf", "markdown", "pdfminer", "docx", "openpyxl", "lxml"} {
			found := false
			for _, got := range rep.Probe.Imported {
				if got == m || strings.HasPrefix(got, m+".") {
					found = true
				}
			}
			if !found {
				t.Errorf("ensure did not probe %s: imported %v", m, rep.Probe.Imported)
			}
		}
	})
}
