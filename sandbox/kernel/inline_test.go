//go:build linux

package kernel

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/internal/testenv"
	"github.com/pylayer/pylayer/sandbox"
)

// fakeMatplotlib is the part of matplotlib's interface that the driver's
// inline backend touches, as matplotlib 3.6 to 3.10 have it: rcParams and
// get_backend, pyplot choosing its backend module from rcParams on first use
// (module://NAME imports NAME) and taking FigureCanvas, FigureManager and show
// from it, Gcf, and a canvas whose print_figure writes the image. The host has
// no matplotlib, and installing it would change the python3 other tests use:
// the real one is left to the e2e test on the curated base.
var fakeMatplotlib = map[string]string{
	"site-packages/matplotlib/__init__.py": `import os
class RcParams(dict):
    pass
rcParams = RcParams(backend=os.environ.get("MPLBACKEND", "agg").lower())
def get_backend():
    return rcParams["backend"]
`,
	"site-packages/matplotlib/_pylab_helpers.py": `class Gcf:
    figs = {}
    @classmethod
    def get_all_fig_managers(cls):
        return list(cls.figs.values())
`,
	"site-packages/matplotlib/backend_bases.py": `class FigureManagerBase:
    def __init__(self, canvas, num):
        self.canvas, self.num = canvas, num
`,
	"site-packages/matplotlib/backends/__init__.py": "",
	"site-packages/matplotlib/backends/backend_agg.py": `from matplotlib.backend_bases import FigureManagerBase as FigureManager
class FigureCanvasAgg:
    def __init__(self, figure):
        self.figure = figure
        figure.canvas = self
    def print_figure(self, f, format="png", **kwargs):
        data = b"\x89PNG " + self.figure.label.encode()
        if isinstance(f, str):
            with open(f, "wb") as out:
                out.write(data)
        else:
            f.write(data)
FigureCanvas = FigureCanvasAgg
def show():
    pass
`,
	"site-packages/matplotlib/figure.py": `class Figure:
    def __init__(self, label):
        self.label = label
    def savefig(self, f, **kwargs):
        if not hasattr(self, "canvas"):
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            FigureCanvasAgg(self)
        self.canvas.print_figure(f, **kwargs)
`,
	"site-packages/matplotlib/pyplot.py": `import importlib
import matplotlib
from matplotlib._pylab_helpers import Gcf
from matplotlib.figure import Figure
_backend = None
def _mod():
    global _backend
    if _backend is None:
        name = matplotlib.rcParams["backend"]
        if name.startswith("module://"):
            _backend = importlib.import_module(name[len("module://"):])
        else:
            _backend = importlib.import_module("matplotlib.backends.backend_" + name)
    return _backend
def figure(label):
    m = _mod()
    fig = Figure(label)
    Gcf.figs[label] = m.FigureManager(m.FigureCanvas(fig), label)
    return fig
def show():
    _mod().show()
def close(which="all"):
    Gcf.figs.clear()
`,
}

func TestInlineBackend(t *testing.T) {
	testenv.Integration(t, "bwrap")
	root := testenv.SharedDir(t)
	for name, content := range fakeMatplotlib {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k := start(t, Options{Spec: sandbox.Spec{Layers: []sandbox.Layer{{Root: root, Kind: sandbox.KindBase}}}})
	png := func(label string) Output {
		return Output{"image/png", base64.StdEncoding.EncodeToString([]byte("\x89PNG " + label))}
	}
	tests := []struct {
		name, code string
		stdout     string
		outputs    []Output
	}{
		{"not imported by the driver", "import sys\nprint('matplotlib' in sys.modules)", "False\n", nil},
		{"plt.show", "import matplotlib, matplotlib.pyplot as plt\nplt.figure('a')\nplt.show()\nprint(matplotlib.get_backend())",
			"module://pylayer_inline\n", []Output{png("a")}},
		{"shown after show: nothing left", "pass", "", nil},
		{"left open at the end", "fig = plt.figure('b')\nprint('drawn')", "drawn\n", []Output{png("b")}},
		{"saved then closed", "f = plt.figure('c')\nf.savefig('/tmp/c.png')\nplt.close('all')\nprint(open('/tmp/c.png', 'rb').read())",
			"b'\\x89PNG c'\n", []Output{png("c")}},
		{"saved and open: once", "plt.figure('d').savefig('/tmp/d.png')", "", []Output{png("d")}},
		{"display of a figure", "from matplotlib.figure import Figure\ndisplay(Figure('e'))", "", []Output{png("e")}},
		{"a subprocess keeps the environment's backend",
			"import subprocess, sys\np = subprocess.run([sys.executable, '-c', 'import matplotlib; print(matplotlib.get_backend())'])", "agg\n", nil},
	}
	for _, tt := range tests {
		res := exec(t, k, tt.code)
		wantOK(t, res)
		if res.Stdout != tt.stdout || len(res.Outputs) != len(tt.outputs) {
			t.Fatalf("%s: stdout %q outputs %v, want %q %v (stderr %q)", tt.name, res.Stdout, res.Outputs, tt.stdout, tt.outputs, res.Stderr)
		}
		for i := range tt.outputs {
			if res.Outputs[i] != tt.outputs[i] {
				t.Errorf("%s: output %d %v, want %v", tt.name, i, res.Outputs[i], tt.outputs[i])
			}
		}
	}
	if res := exec(t, k, "import os\nos.environ.get('MPLBACKEND')"); len(res.Outputs) != 1 || strings.Contains(res.Outputs[0].Data, "pylayer") {
		t.Errorf("MPLBACKEND in the kernel's environment: %v", res.Outputs)
	}
}
