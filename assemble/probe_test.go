package assemble

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// writeDist writes a distribution's files and a dist-info (with top_level.txt when
// tops is not nil) under site.
func writeDist(t *testing.T, site, name string, tops []string, files map[string]string) {
	t.Helper()
	di := filepath.Join(site, name+"-1.0.dist-info")
	var record []string
	for p, body := range files {
		full := filepath.Join(site, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		record = append(record, p+",,")
	}
	record = append(record, name+"-1.0.dist-info/METADATA,,", name+"-1.0.dist-info/RECORD,,")
	if err := os.MkdirAll(di, 0o755); err != nil {
		t.Fatal(err)
	}
	meta := "Metadata-Version: 2.1\nName: " + name + "\nVersion: 1.0\n"
	for f, body := range map[string]string{"METADATA": meta, "RECORD": strings.Join(record, "\n") + "\n"} {
		if err := os.WriteFile(filepath.Join(di, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if tops != nil {
		if err := os.WriteFile(filepath.Join(di, "top_level.txt"), []byte(strings.Join(tops, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProbeScript runs the probe with the host's python3 on a site of fake
// distributions: a PIL whose top level imports but whose PIL.Image (a known submodule)
// raises (PIL.ImageDraw and PIL.ImageFont, absent, are not failures), a module found
// through RECORD alone that warns, one that writes on fd 2 from
// below Python, and one that fails at the top level (its submodules are not tried).
func TestProbeScript(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("the probe is Python: %v", err)
	}
	site := t.TempDir()
	writeDist(t, site, "pillow", []string{"PIL"}, map[string]string{
		"PIL/__init__.py": "",
		"PIL/Image.py":    "def _load():\n    raise ImportError('libimagequant.so.0: cannot open shared object file: No such file or directory')\n_load()\n",
	})
	writeDist(t, site, "flat", nil, map[string]string{"flat.py": "import warnings\nwarnings.warn('flat is old', UserWarning)\n"})
	writeDist(t, site, "noisy", []string{"noisy"}, map[string]string{"noisy/__init__.py": "import os\nos.write(2, b'Fontconfig error: Cannot load default config file\\n')\n"})
	writeDist(t, site, "numpy", []string{"numpy"}, map[string]string{"numpy/__init__.py": "raise RuntimeError('broken\\nsecond line')\n"})
	out, stderr := runProbe(t, python, site)
	if stderr != "" {
		t.Errorf("the probe let %q through to its own stderr", stderr)
	}
	r, err := ParseProbe(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PIL", "flat", "noisy"}; !slices.Equal(r.Imported, want) {
		t.Errorf("imported %q, want %q", r.Imported, want)
	}
	if want := []string{"PIL.Image", "numpy"}; !slices.Equal(failedModules(r), want) {
		t.Fatalf("failed %q, want %q (%+v)", failedModules(r), want, r.Failures)
	}
	img := r.Failures[0]
	if img.Type != "ImportError" || !strings.Contains(img.Message, "libimagequant.so.0") || len(img.Lines) == 0 || !strings.Contains(img.Lines[len(img.Lines)-1], "ImportError: libimagequant.so.0") {
		t.Errorf("PIL.Image failure %+v, want the ImportError with its traceback's last lines", img)
	}
	if got := r.Failed["numpy"]; got != "RuntimeError: broken\nsecond line" {
		t.Errorf("failed[numpy] = %q", got)
	}
	warned := map[string]string{}
	for _, w := range r.Warnings {
		warned[w.Module] = w.Text
	}
	if !strings.Contains(warned["flat"], "UserWarning: flat is old") || !strings.Contains(warned["noisy"], "Fontconfig error") {
		t.Errorf("warnings %+v, want flat's UserWarning and noisy's fd 2 line", r.Warnings)
	}
	sum := r.Summary()
	for _, want := range []string{"2 of 5 imports failed", "PIL.Image: ImportError: libimagequant.so.0", "numpy: RuntimeError: broken", "2 imports wrote on stdout or stderr", "noisy: Fontconfig error"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
	if strings.Contains(sum, "second line") {
		t.Errorf("summary has more than a message's first line:\n%s", sum)
	}
}

// runProbe runs the probe with python on the host over site (PYTHONPATH), as the sandbox
// would, and returns its stdout and stderr; it failing to run fails the test.
func runProbe(t *testing.T, python, site string) ([]byte, string) {
	t.Helper()
	cmd := ProbeCommand(python, site)
	c := exec.CommandContext(context.Background(), cmd[0], cmd[1:]...)
	c.Env = append(os.Environ(), "PYTHONPATH="+site, "PYTHONDONTWRITEBYTECODE=1")
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, stderr.String())
	}
	return out, stderr.String()
}

func failedModules(r *ProbeResult) []string {
	var out []string
	for _, f := range r.Failures {
		out = append(out, f.Module)
	}
	return out
}

// TestProbeOutputNotForged: a module that prints on import (a banner, or JSON that looks
// like the probe's answer), from Python, from a subprocess or at exit, neither breaks the
// probe's answer nor replaces it; what it printed is reported as that import's output.
func TestProbeOutputNotForged(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("the probe is Python: %v", err)
	}
	site := t.TempDir()
	fake := `{"python": "0", "imported": ["forged"], "failed": {}, "failures": [], "warnings": []}`
	writeDist(t, site, "chatty", []string{"chatty"}, map[string]string{"chatty/__init__.py": "import atexit, os, subprocess, sys\n" +
		"print('chatty 1.0 loaded')\n" +
		"print(" + strconv.Quote(fake) + ")\n" +
		"sys.stdout.flush()\n" +
		"os.write(1, b'from fd 1\\n')\n" +
		"subprocess.run([sys.executable, '-c', 'print(\"from a child\")'])\n" +
		"atexit.register(lambda: print(" + strconv.Quote(fake) + "))\n"})
	writeDist(t, site, "broken", []string{"broken"}, map[string]string{"broken/__init__.py": "raise ImportError('no')\n"})
	out, _ := runProbe(t, python, site)
	r, err := ParseProbe(out)
	if err != nil {
		t.Fatalf("%v\noutput: %q", err, out)
	}
	if want := []string{"chatty"}; !slices.Equal(r.Imported, want) {
		t.Errorf("imported %q, want %q", r.Imported, want)
	}
	if want := []string{"broken"}; !slices.Equal(failedModules(r), want) {
		t.Errorf("failed %q, want %q", failedModules(r), want)
	}
	if len(r.Warnings) != 1 || r.Warnings[0].Module != "chatty" {
		t.Fatalf("warnings %+v, want chatty's output", r.Warnings)
	}
	for _, want := range []string{"chatty 1.0 loaded", "from fd 1", "from a child", `"forged"`} {
		if !strings.Contains(r.Warnings[0].Text, want) {
			t.Errorf("chatty's output %q lacks %q", r.Warnings[0].Text, want)
		}
	}

	// A module that ends the interpreter at import leaves no answer, and the error says so.
	writeDist(t, site, "aaexit", []string{"aaexit"}, map[string]string{"aaexit/__init__.py": "import os\nprint(" + strconv.Quote(fake) + ", flush=True)\nos._exit(0)\n"})
	out, _ = runProbe(t, python, site)
	if r, err := ParseProbe(out); err == nil || !strings.Contains(err.Error(), "wrote nothing") {
		t.Fatalf("ParseProbe of a probe ended by an import: %+v, %v (output %q)", r, err, out)
	}
}

func TestParseProbeRefusesGarbage(t *testing.T) {
	if _, err := ParseProbe([]byte("Traceback (most recent call last):")); err == nil {
		t.Fatal("ParseProbe accepted output that is not the probe's JSON")
	}
	r, err := ParseProbe([]byte(`{"python":"3.11.2","imported":["a"]}`))
	if err != nil || r.Failed == nil || r.Summary() != "" {
		t.Fatalf("ParseProbe of a clean probe: %+v %v", r, err)
	}
}

// FuzzParseProbe: any output of a sandbox decodes or is refused, never panics; what
// decodes summarises, and encodes back to what decodes the same.
func FuzzParseProbe(f *testing.F) {
	f.Add([]byte(`{"python":"3.11.2","imported":["a"]}`))
	f.Add([]byte(`{"python":"3.12.4","prefix":"/opt/python","imported":["PIL"],"failed":{"numpy":"RuntimeError: x\ny"},` +
		`"failures":[{"module":"numpy","type":"RuntimeError","message":"x\ny","lines":["a","b"]}],"warnings":[{"module":"PIL","text":"w"}]}`))
	f.Add([]byte("Traceback (most recent call last):"))
	f.Add([]byte("  \n"))
	f.Add([]byte(`{"failed":null,"failures":[null],"warnings":[{}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseProbe(b)
		if err != nil {
			if r != nil {
				t.Fatalf("a result with an error: %+v", r)
			}
			return
		}
		if r.Failed == nil {
			t.Fatal("Failed is nil")
		}
		_ = r.Summary()
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := ParseProbe(again)
		if err != nil {
			t.Fatalf("re-encoded %s: %v", again, err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip changed the result:\n%+v\n%+v", r, r2)
		}
	})
}
