package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// officeImports are the top-level modules of the office set's distributions.
var officeImports = []string{"docx", "et_xmlfile", "lxml", "openpyxl", "xlsxwriter"}

// ensureJSON is the part of pylayer ensure --json the suites read.
type ensureJSON struct {
	Python, Base *struct {
		Ref, Digest, Root, Error string
		OK                       bool
	}
	Degraded bool `json:"degraded"`
	Probe    struct {
		Python   string            `json:"python"`
		Prefix   string            `json:"prefix"`
		Imported []string          `json:"imported"`
		Failed   map[string]string `json:"failed"`
	} `json:"probe"`
	ProbeErr string `json:"probe_error"`
	OK       bool   `json:"ok"`
}

// TestRunInterpreter publishes the Debian CPython prefix with pylayer interpreter publish
// and runs on it: sys.prefix is /opt/python and nothing says degraded; without --python
// the run says it is degraded. pylayer ensure probes the base on it and reports a bad base
// promptly, exiting 0.
func TestRunInterpreter(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h := newHost(t)
	repo := "oci:" + filepath.Join(sharedDir(t), "repo")
	priv, pub := h.keygen(ctx, t, "ci")
	base := h.publish(ctx, t, locks(t)["office"], repo, priv)
	py := publishInterpreter(ctx, t, h, repo, priv)
	trust := []string{"--trust", pub}
	const check = "import sys, docx; print(sys.prefix); print(sys.executable); print(docx.__file__)"

	t.Run("run on the interpreter artifact", func(t *testing.T) {
		r := h.run(ctx, t, append(append([]string{"run"}, trust...), "--python", py.Ref, "--layer", base.Ref, "--", "python3", "-c", check)...)
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 3 || lines[0] != "/opt/python" || !strings.HasPrefix(lines[1], "/opt/python/bin/") ||
			!strings.HasPrefix(lines[2], "/opt/pylayer/layers/0-base/site-packages/docx/") {
			t.Errorf("sys.prefix, sys.executable, docx.__file__ = %q, want /opt/python, /opt/python/bin/..., the base layer", lines)
		}
		if strings.Contains(r.stderr, "degraded") {
			t.Errorf("a run with --python says degraded:\n%s", r.stderr)
		}
		a := h.printArgv(ctx, t, append(trust, "--python", py.Ref, "--layer", base.Ref)...)
		if a.Degraded {
			t.Errorf("--print-argv --json says degraded with --python")
		}
		if got, want := mountSource(a.Argv, "/opt/python"), filepath.Join(h.cache, "layers", "sha256", strings.TrimPrefix(py.Digest, "sha256:")); got != want {
			t.Errorf("/opt/python is mounted from %q, want the cached interpreter %s", got, want)
		}
	})

	t.Run("run without an interpreter is degraded, and says so", func(t *testing.T) {
		r := h.run(ctx, t, append(append([]string{"run"}, trust...), "--layer", base.Ref, "--", "python3", "-c", check)...)
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		if !strings.Contains(r.stderr, "degraded mode") {
			t.Errorf("a run without --python does not say degraded mode on stderr:\n%s", r.stderr)
		}
		if lines := strings.Split(r.stdout, "\n"); lines[0] != "/usr" {
			t.Errorf("degraded sys.prefix = %q, want the host's /usr", lines[0])
		}
		if a := h.printArgv(ctx, t, append(trust, "--layer", base.Ref)...); !a.Degraded {
			t.Errorf("--print-argv --json without --python does not say degraded")
		}
	})

	t.Run("artifacts in the wrong place are refused", func(t *testing.T) {
		if e := h.refuse(ctx, t, append(append([]string{"run"}, trust...), "--python", base.Ref, "--", "true")...); !strings.Contains(e, "not an interpreter") {
			t.Errorf("--python BASE: %s", e)
		}
		if e := h.refuse(ctx, t, append(append([]string{"run"}, trust...), "--layer", py.Ref, "--", "true")...); !strings.Contains(e, "--python") {
			t.Errorf("--layer INTERPRETER: %s", e)
		}
	})

	t.Run("ensure", func(t *testing.T) {
		var rep ensureJSON
		out := h.must(ctx, t, append([]string{"--json", "ensure", "--python", py.Ref, "--base", base.Ref}, trust...)...)
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("pylayer ensure --json printed %q: %v", out, err)
		}
		imported := map[string]bool{}
		for _, m := range rep.Probe.Imported {
			imported[m] = true
		}
		missing := false
		for _, m := range append(slices.Clone(officeImports), "lxml.etree") { // and a submodule users import
			missing = missing || !imported[m]
		}
		if !rep.OK || rep.Degraded || rep.Python == nil || !rep.Python.OK || rep.Base == nil || !rep.Base.OK || rep.ProbeErr != "" ||
			rep.Probe.Prefix != "/opt/python" || len(rep.Probe.Failed) != 0 || missing {
			t.Errorf("pylayer ensure --json = %s\nwant ok, not degraded, prefix /opt/python, imported %v and lxml.etree", out, officeImports)
		}
		if rep.Base != nil && rep.Base.Digest != base.Digest || rep.Python != nil && rep.Python.Digest != py.Digest {
			t.Errorf("ensure reports digests %+v %+v, want %s and %s", rep.Python, rep.Base, py.Digest, base.Digest)
		}
	})

	t.Run("ensure with a bogus base", func(t *testing.T) {
		for _, bogus := range []string{
			"127.0.0.1:1/nothing/here:base-missing", // nothing listens
			repo + ":base-0000",                     // no such tag
			repo + "@sha256:" + strings.Repeat("0", 64),
		} {
			start := time.Now()
			r := h.run(ctx, t, append([]string{"--json", "ensure", "--python", py.Ref, "--base", bogus}, trust...)...)
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("ensure --base %s took %s", bogus, d)
			}
			if r.code != 0 {
				t.Errorf("ensure --base %s: exit %d, want 0 (a host's start-up goes on)\n%s", bogus, r.code, r.stderr)
				continue
			}
			var rep ensureJSON
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("pylayer ensure --json printed %q: %v", r.stdout, err)
			}
			if rep.OK || rep.Base == nil || rep.Base.OK || rep.Base.Error == "" || rep.Python == nil || !rep.Python.OK {
				t.Errorf("ensure --base %s = %s\nwant ok false, the base's error reported, the interpreter ok", bogus, r.stdout)
			}
		}
	})
}
