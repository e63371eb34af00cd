package e2e

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/test/fixture"
)

// TestEnsureNamesBrokenSubmodule: a base whose top-level PIL imports but whose PIL.Image
// (a submodule users import) raises is reported by pylayer ensure with the module, the
// exception and its message, in --json and in text; what an import writes on stderr is
// reported too.
func TestEnsureNamesBrokenSubmodule(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h := newHost(t)
	idx := t.TempDir()
	for _, w := range []fixture.Wheel{
		{Name: "pillow", Version: "10.0", Files: []fixture.File{
			{Path: "PIL/__init__.py", Data: []byte("")},
			{Path: "PIL/Image.py", Data: []byte("raise ImportError('libimagequant.so.0: cannot open shared object file: No such file or directory')\n")},
		}},
		{Name: "noisy", Version: "1.0", Files: []fixture.File{
			{Path: "noisy/__init__.py", Data: []byte("import warnings\nwarnings.warn('noisy is noisy', UserWarning)\n")},
		}},
	} {
		if _, err := w.Write(idx); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(fixture.PlainIndex(idx))
	t.Cleanup(srv.Close)
	lk := filepath.Join(h.home, "broken.lock.json")
	h.must(ctx, t, lockArgs(srv.URL+"/simple/", lk, []string{"pillow", "noisy"})...)
	repo := "oci:" + filepath.Join(sharedDir(t), "repo")
	priv, pub := h.keygen(ctx, t, "ci")
	base := h.publish(ctx, t, lk, repo, priv)
	py := publishInterpreter(ctx, t, h, repo, priv)
	trust := []string{"--trust", pub}

	r := h.run(ctx, t, append([]string{"--json", "ensure", "--python", py.Ref, "--base", base.Ref}, trust...)...)
	if r.code != 0 {
		t.Fatalf("ensure: exit %d\n%s", r.code, r.stderr)
	}
	var rep struct {
		OK       bool   `json:"ok"`
		ProbeErr string `json:"probe_error"`
		Probe    struct {
			Imported []string          `json:"imported"`
			Failed   map[string]string `json:"failed"`
			Failures []struct {
				Module, Type, Message string
				Lines                 []string
			} `json:"failures"`
			Warnings []struct{ Module, Text string } `json:"warnings"`
		} `json:"probe"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("pylayer ensure --json printed %q: %v", r.stdout, err)
	}
	if rep.OK || !strings.Contains(rep.ProbeErr, "PIL.Image") || len(rep.Probe.Failures) != 1 {
		t.Fatalf("ensure --json = %s\nwant not ok, PIL.Image named as the one failure", r.stdout)
	}
	f := rep.Probe.Failures[0]
	if f.Module != "PIL.Image" || f.Type != "ImportError" || !strings.Contains(f.Message, "libimagequant.so.0") || len(f.Lines) == 0 {
		t.Errorf("failure %+v, want PIL.Image's ImportError with its traceback", f)
	}
	if len(rep.Probe.Warnings) != 1 || rep.Probe.Warnings[0].Module != "noisy" || !strings.Contains(rep.Probe.Warnings[0].Text, "noisy is noisy") {
		t.Errorf("warnings %+v, want noisy's UserWarning", rep.Probe.Warnings)
	}
	text := h.run(ctx, t, append([]string{"ensure", "--python", py.Ref, "--base", base.Ref}, trust...)...)
	for _, want := range []string{"PIL.Image: ImportError: libimagequant.so.0", "noisy: "} {
		if !strings.Contains(text.stdout, want) {
			t.Errorf("ensure's text lacks %q:\n%s", want, text.stdout)
		}
	}
}
