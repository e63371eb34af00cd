package lock

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/layers/pep508"
)

func TestExportRequirements(t *testing.T) {
	l := sample(t)
	b, err := Export(l, FormatRequirements)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Export(l, FormatRequirements)
	if string(again) != string(b) {
		t.Error("two exports of one lock differ")
	}
	s := string(b)
	for _, p := range l.Packages {
		want := p.Name + "==" + p.Version + " \\\n    --hash=sha256:" + p.SHA256 + "\n"
		if !strings.Contains(s, want) {
			t.Errorf("export lacks %q:\n%s", want, s)
		}
	}
	key, _ := l.Key()
	if !strings.Contains(s, key) {
		t.Error("the export does not name the lock's key")
	}
	for _, line := range strings.Split(s, "\n") {
		if line != "" && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "    --hash=sha256:") && !strings.Contains(line, "==") {
			t.Errorf("unexpected line %q", line)
		}
	}
}

// TestExportPylock parses the export with Python's own tomllib (3.11+) and checks
// every package, wheel and hash against the lock.
func TestExportPylock(t *testing.T) {
	l := sample(t)
	// A URL that needs quoting in TOML; the export lists packages in the lock's canonical order.
	l.Packages[0].URL = `http://127.0.0.1:9/simple/a"b\c/` + l.Packages[0].Filename
	l.Normalize()
	b, err := Export(l, FormatPylock)
	if err != nil {
		t.Fatal(err)
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 (tomllib) is needed: %v", err)
	}
	cmd := exec.Command(py, "-c", `import json, sys, tomllib; json.dump(tomllib.load(sys.stdin.buffer), sys.stdout)`)
	cmd.Stdin = strings.NewReader(string(b))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tomllib refused the export: %v\n%s", err, b)
	}
	var doc struct {
		LockVersion    string   `json:"lock-version"`
		CreatedBy      string   `json:"created-by"`
		RequiresPython string   `json:"requires-python"`
		Environments   []string `json:"environments"`
		Packages       []struct {
			Name, Version string
			Wheels        []struct {
				Name, URL string
				Size      int64
				Hashes    map[string]string
			}
		}
		Tool struct {
			Pylayer struct{ Key, Kind string }
		}
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	key, _ := l.Key()
	if doc.LockVersion != "1.0" || doc.CreatedBy != "pylayer" || doc.Tool.Pylayer.Key != key || doc.Tool.Pylayer.Kind != string(l.Kind) {
		t.Errorf("header: %+v", doc)
	}
	if doc.RequiresPython != "=="+l.Target.PythonFull || len(doc.Environments) != 1 || !strings.Contains(doc.Environments[0], l.Target.PythonFull) {
		t.Errorf("requires-python %q, environments %q", doc.RequiresPython, doc.Environments)
	}
	if len(doc.Packages) != len(l.Packages) {
		t.Fatalf("%d packages, want %d", len(doc.Packages), len(l.Packages))
	}
	for i, p := range l.Packages {
		d := doc.Packages[i]
		if d.Name != p.Name || d.Version != p.Version || len(d.Wheels) != 1 {
			t.Errorf("package %d: %+v, want %s %s", i, d, p.Name, p.Version)
			continue
		}
		w := d.Wheels[0]
		if w.Name != p.Filename || w.URL != p.URL || w.Size != p.Size || w.Hashes["sha256"] != p.SHA256 {
			t.Errorf("wheel of %s: %+v, want %s %s %d %s", p.Name, w, p.Filename, p.URL, p.Size, p.SHA256)
		}
	}
}

func TestExportRefuses(t *testing.T) {
	l := sample(t)
	if _, err := Export(l, "poetry"); err == nil || !strings.Contains(err.Error(), "requirements or pylock") {
		t.Errorf("unknown format: %v", err)
	}
	l.Packages[0].URL = ""
	if _, err := Export(l, FormatPylock); err == nil || !strings.Contains(err.Error(), "has no URL") {
		t.Errorf("pylock without a URL: %v", err)
	}
	if _, err := Export(l, FormatRequirements); err != nil {
		t.Errorf("requirements needs no URL: %v", err)
	}
}

func TestTOMLString(t *testing.T) {
	for in, want := range map[string]string{`a`: `"a"`, `a"b`: `"a\"b"`, `a\b`: `"a\\b"`, "a\nb": `"a\u000Ab"`, "é": `"é"`} {
		if got := tomlString(in); got != want {
			t.Errorf("tomlString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestCheckHashes(t *testing.T) {
	l := sample(t)
	a, b := strings.Repeat("a", 64), strings.Repeat("b", 64)
	req := func(name string, hashes ...string) pep508.ReqFileLine {
		r, err := pep508.ParseRequirement(name)
		if err != nil {
			t.Fatal(err)
		}
		return pep508.ReqFileLine{File: "r.txt", Line: 1, Req: r, Hashes: hashes}
	}
	tests := []struct {
		name  string
		lines []pep508.ReqFileLine
		ok    bool
		want  string
	}{
		{"no hashes: not checked", []pep508.ReqFileLine{req("openpyxl")}, true, ""},
		{"every package hashed", []pep508.ReqFileLine{req("openpyxl", a), req("et_xmlfile", "c", b)}, true, ""},
		{"a dependency without a hash", []pep508.ReqFileLine{req("openpyxl", a)}, false, "et-xmlfile 1.0.1 is in the lock but"},
		{"a wrong hash", []pep508.ReqFileLine{req("openpyxl", b), req("et-xmlfile", b)}, false, "does not allow"},
	}
	for _, tt := range tests {
		err := l.CheckHashes(tt.lines)
		if (err == nil) != tt.ok || (err != nil && (!errors.Is(err, ErrHashMismatch) || !strings.Contains(err.Error(), tt.want))) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}
