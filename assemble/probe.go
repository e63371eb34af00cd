package assemble

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/pylayer/pylayer/sandbox"
)

//go:embed probe.py
var probeScript string

// Submodules are the submodules users import of a top-level name, which the probe
// imports after the name itself. A distribution's metadata names only its top-level
// modules (top_level.txt, RECORD), and those often import without their compiled
// parts or lazily loaded pieces: "import PIL" passes while PIL.Image, which loads
// _imaging and its libraries, fails; matplotlib.pyplot is what loads a backend and the
// font cache; numpy.linalg loads LAPACK. So the probe's list is the metadata plus this
// small table of what users of the curated base (and common wheels) import.
var Submodules = map[string][]string{
	"PIL":          {"PIL.Image", "PIL.ImageDraw", "PIL.ImageFont"},
	"matplotlib":   {"matplotlib.pyplot"},
	"numpy":        {"numpy.linalg", "numpy.fft", "numpy.random"},
	"lxml":         {"lxml.etree", "lxml.objectify"},
	"reportlab":    {"reportlab.pdfgen.canvas", "reportlab.platypus", "reportlab.graphics.renderPM"},
	"pdfminer":     {"pdfminer.high_level"},
	"pypdf":        {"pypdf.generic"},
	"docx":         {"docx.shared"},
	"openpyxl":     {"openpyxl.chart"},
	"pptx":         {"pptx.util"},
	"pdfplumber":   {"pdfplumber.page"},
	"cryptography": {"cryptography.hazmat.bindings._rust", "cryptography.x509"},
	"scipy":        {"scipy.linalg", "scipy.sparse"},
	"pandas":       {"pandas.io.formats.style"},
	"fontTools":    {"fontTools.ttLib"},
	"markdown":     {"markdown.extensions.tables"},
}

// ProbeSite is the part of a distribution's path that marks it as a layer's: the probe
// imports only what the layers hold, not the interpreter's own site-packages.
const ProbeSite = "/opt/pylayer/"

// ProbeResult is what the probe found in the sandbox.
type ProbeResult struct {
	Python   string            `json:"python"`   // sys.version's first word
	Prefix   string            `json:"prefix"`   // sys.prefix
	Imported []string          `json:"imported"` // in the order imported
	Failed   map[string]string `json:"failed"`   // module: "Type: message"
	Failures []ImportFailure   `json:"failures"` // the same, with the traceback's last lines
	Warnings []ImportWarning   `json:"warnings"` // what each import wrote on stdout or stderr
}

// ImportFailure is one import that raised.
type ImportFailure struct {
	Module  string   `json:"module"`
	Type    string   `json:"type"`    // the exception's class, e.g. ImportError
	Message string   `json:"message"` // str(exception)
	Lines   []string `json:"lines"`   // the last lines of the traceback
}

// ImportWarning is what one import wrote on stdout or stderr (a banner, warnings, C
// libraries' messages).
type ImportWarning struct {
	Module string `json:"module"`
	Text   string `json:"text"`
}

// ProbeCommand is the command that imports every top-level name of the distributions
// under site (ProbeSite in a sandbox) and their Submodules, for python (a python3 on
// the sandbox's PATH, or a host binary in tests); its stdout is ParseProbe's input.
func ProbeCommand(python, site string) []string {
	arg, _ := json.Marshal(map[string]any{"site": site, "submodules": Submodules}) // strings only: cannot fail
	return []string{python, "-c", probeScript, string(arg)}
}

// ProbeEnv is the environment the probe's imports need in a sandbox: matplotlib uses its
// non-interactive Agg backend, as it must without a display.
var ProbeEnv = map[string]string{"MPLBACKEND": "Agg"}

// ParseProbe decodes the probe's output: one JSON object, which the probe writes on a
// descriptor of its own (what the layers' modules print goes to the warnings).
func ParseProbe(stdout []byte) (*ProbeResult, error) {
	if len(bytes.TrimSpace(stdout)) == 0 {
		return nil, errors.New("reading the import probe's output: it wrote nothing: " +
			"an import ended the interpreter before the probe could answer (os._exit, a crash); " +
			"import the layers' modules one by one in `pylayer run` to find which")
	}
	var r ProbeResult
	if err := json.Unmarshal(stdout, &r); err != nil {
		return nil, fmt.Errorf("reading the import probe's output: %w", err)
	}
	if r.Failed == nil {
		r.Failed = map[string]string{}
	}
	return &r, nil
}

// Summary says in a few lines which imports failed and why, and what imports wrote on
// stdout or stderr; "" when every import was clean.
func (r *ProbeResult) Summary() string {
	var b strings.Builder
	if n := len(r.Failures); n > 0 {
		fmt.Fprintf(&b, "%d of %d imports failed:", n, n+len(r.Imported))
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "\n  %s: %s: %s", f.Module, f.Type, firstLine(f.Message))
		}
	}
	if len(r.Warnings) > 0 {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%d imports wrote on stdout or stderr:", len(r.Warnings))
		for _, w := range r.Warnings {
			fmt.Fprintf(&b, "\n  %s: %s", w.Module, firstLine(w.Text))
		}
	}
	return b.String()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// Probe runs the import probe in a sandbox of spec (its interpreter and layers; the
// command and ProbeEnv are set here) and returns what it found. An error means the
// probe itself did not run or answer; failed imports are in the result.
func Probe(ctx context.Context, bwrap string, spec sandbox.Spec, opts sandbox.RunOptions) (*ProbeResult, error) {
	spec.Command = ProbeCommand("python3", ProbeSite)
	env := map[string]string{}
	for k, v := range spec.Env {
		env[k] = v
	}
	for k, v := range ProbeEnv {
		env[k] = v
	}
	spec.Env = env
	res, err := sandbox.Run(ctx, bwrap, spec, opts)
	if err != nil {
		return nil, fmt.Errorf("running the import probe: %w", err)
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("the import probe exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return ParseProbe(res.Stdout)
}
