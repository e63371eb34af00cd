package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLockExport: a lock exported as a hashed requirements file installs with pip's
// --require-hashes and locks again, through `lock -r` (its --index-url line and hashes
// honoured), to the same wheels; a wrong hash is refused; the PEP 751 export parses with
// tomllib and names every package and hash of the lock.
func TestLockExport(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, url := index(t)
	h := newHost(t)
	lockPath := filepath.Join(h.home, "office.lock.json")
	var locked struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal([]byte(h.must(ctx, t, lockArgs(url, lockPath, []string{"python-docx", "openpyxl"})...)), &locked); err != nil {
		t.Fatal(err)
	}
	var l struct {
		Packages []struct{ Name, Version, Filename, SHA256 string }
	}
	b, err := os.ReadFile(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &l); err != nil || len(l.Packages) < 3 {
		t.Fatalf("lock %s: %v", b, err)
	}

	// requirements.txt with hashes: pip installs exactly these wheels.
	req := filepath.Join(h.home, "requirements.txt")
	h.must(ctx, t, "export", lockPath, "--format", "requirements", "-o", req)
	target := filepath.Join(h.home, "site")
	pip := exec.CommandContext(ctx, oracle(t), "-m", "pip", "install", "--require-hashes", "--no-deps", "--only-binary=:all:",
		"--no-cache-dir", "--disable-pip-version-check", "--target", target, "--index-url", url, "-r", req)
	pip.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + h.home, "PIP_CONFIG_FILE=/dev/null"}
	if out, err := pip.CombinedOutput(); err != nil {
		t.Fatalf("pip install --require-hashes -r the export: %v\n%s", err, out)
	}
	for _, p := range l.Packages {
		dist, _ := filepath.Glob(filepath.Join(target, strings.ReplaceAll(p.Filename[:strings.Index(p.Filename, "-")], "-", "_")+"-"+p.Version+".dist-info"))
		if len(dist) != 1 {
			t.Errorf("pip did not install %s %s from the export", p.Name, p.Version)
		}
	}

	// lock -r reads the export back (with an --index-url line instead of the flag): the
	// same wheels.
	withIndex := filepath.Join(h.home, "hashed.txt")
	exported, _ := os.ReadFile(req)
	if err := os.WriteFile(withIndex, append([]byte("--index-url "+url+"\n"), exported...), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"lock", "-r", withIndex}, targetFlags...)
	var again struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal([]byte(h.must(ctx, t, append(args, "-o", filepath.Join(h.home, "again.lock.json"), "--json")...)), &again); err != nil {
		t.Fatal(err)
	}
	if again.Key == "" {
		t.Fatal("lock -r of the export printed no key")
	}
	b2, err := os.ReadFile(filepath.Join(h.home, "again.lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var l2 struct {
		Packages []struct{ Name, Version, Filename, SHA256 string }
	}
	if err := json.Unmarshal(b2, &l2); err != nil {
		t.Fatal(err)
	}
	if len(l2.Packages) != len(l.Packages) {
		t.Fatalf("lock -r of the export: %d packages, want %d", len(l2.Packages), len(l.Packages))
	}
	for i := range l.Packages {
		if l2.Packages[i] != l.Packages[i] {
			t.Errorf("lock -r of the export: %+v, want %+v", l2.Packages[i], l.Packages[i])
		}
	}
	// A hash the index's file does not have: refused, naming the package.
	tampered := strings.Replace(string(exported), l.Packages[0].SHA256, strings.Repeat("0", 64), 1)
	if err := os.WriteFile(withIndex, []byte("--index-url "+url+"\n"+tampered), 0o644); err != nil {
		t.Fatal(err)
	}
	r := h.run(ctx, t, append(args, "-o", filepath.Join(h.home, "bad.lock.json"))...)
	if r.code == 0 || !strings.Contains(r.stderr, "hash mismatch") || !strings.Contains(r.stderr, l.Packages[0].Name) {
		t.Errorf("a tampered hash: exit %d, stderr %q; want a hash mismatch naming %s", r.code, r.stderr, l.Packages[0].Name)
	}
	if _, err := os.Stat(filepath.Join(h.home, "bad.lock.json")); err == nil {
		t.Error("a refused lock was written")
	}

	// pylock.toml: tomllib parses it; every package and hash is there.
	pylock := filepath.Join(h.home, "pylock.toml")
	h.must(ctx, t, "export", lockPath, "--format", "pylock", "-o", pylock)
	parse := exec.CommandContext(ctx, oracle(t), "-c", `import json, sys, tomllib
d = tomllib.load(open(sys.argv[1], "rb"))
print(json.dumps({"v": d["lock-version"], "p": {p["name"]: [p["version"], p["wheels"][0]["name"], p["wheels"][0]["hashes"]["sha256"]] for p in d["packages"]}}))`, pylock)
	out, err := parse.Output()
	if err != nil {
		t.Fatalf("tomllib: %v", err)
	}
	var doc struct {
		V string
		P map[string][]string
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.V != "1.0" || len(doc.P) != len(l.Packages) {
		t.Errorf("pylock.toml: lock-version %q, %d packages; want 1.0 and %d", doc.V, len(doc.P), len(l.Packages))
	}
	for _, p := range l.Packages {
		if got := doc.P[p.Name]; len(got) != 3 || got[0] != p.Version || got[1] != p.Filename || got[2] != p.SHA256 {
			t.Errorf("pylock.toml entry of %s: %q, want %s %s %s", p.Name, got, p.Version, p.Filename, p.SHA256)
		}
	}
}
