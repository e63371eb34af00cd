package e2e

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/layers/wheel"
	"github.com/pylayer/pylayer/test/fixture"
)

// installed is one file of an installed tree: its content and whether it is executable.
type installed struct {
	data []byte
	exec bool
}

// pipOnly are .dist-info files whose content depends on the installer, not the wheel.
var pipOnly = map[string]bool{"INSTALLER": true, "RECORD": true, "direct_url.json": true}

// TestInstallMatchesPip installs every real wheel we have (Debian's pip, setuptools and
// wheel, and the office set repacked from Debian) with wheel.Install and with pip --target,
// and compares the trees file by file: same paths, same bytes, same executable bits, except
// INSTALLER, RECORD, direct_url.json and the shebang line of scripts.
func TestInstallMatchesPip(t *testing.T) {
	py := oracle(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	wheels := sharedDir(t)
	debian, err := fixture.DebianWheels(ctx, wheels)
	if err != nil {
		t.Fatal(err)
	}
	office, err := fixture.RepackDebian(ctx, debCache(), wheels)
	if err != nil {
		t.Fatal(err)
	}
	// The group returns only when its parallel subtests are done, before cancel runs.
	t.Run("wheels", func(t *testing.T) {
		for _, whl := range append(debian, office...) {
			t.Run(filepath.Base(whl), func(t *testing.T) {
				t.Parallel()
				work := sharedDir(t)
				dest := filepath.Join(work, "layer")
				inst, err := wheel.Install(ctx, whl, dest, wheel.InstallOptions{Requested: true, PythonVersion: "3.11"})
				if err != nil {
					t.Fatal(err)
				}
				target := filepath.Join(work, "pip")
				cmd := exec.CommandContext(ctx, py, "-m", "pip", "install", "--isolated", "--no-deps", "--no-compile",
					"--no-index", "--disable-pip-version-check", "--no-warn-script-location", "--target", target, whl)
				cmd.Env = append(os.Environ(), "PIP_CONFIG_FILE="+os.DevNull)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("pip install: %v\n%s", err, out)
				}

				ours := readTree(t, dest, func(rel string) string { return rel })
				theirs := readTree(t, target, func(rel string) string {
					if rel == "bin" || strings.HasPrefix(rel, "bin/") {
						return rel
					}
					return "site-packages/" + rel
				})
				if len(theirs) == 0 {
					t.Fatal("pip installed nothing")
				}
				t.Logf("%d files compared, %d scripts", len(theirs), countPrefix(theirs, "bin/"))
				if !strings.Contains(strings.Join(keys(ours), "\n"), "site-packages/"+inst.DistInfo+"/METADATA") {
					t.Errorf("Installed.DistInfo %q has no METADATA in the tree", inst.DistInfo)
				}
				for _, p := range union(ours, theirs) {
					a, inOurs := ours[p]
					b, inTheirs := theirs[p]
					switch {
					case !inOurs:
						t.Errorf("%s: pip installs it, wheel.Install does not", p)
					case !inTheirs:
						t.Errorf("%s: wheel.Install writes it, pip does not", p)
					case a.exec != b.exec:
						t.Errorf("%s: executable %v, pip %v", p, a.exec, b.exec)
					case !bytes.Equal(sansShebang(p, a.data), sansShebang(p, b.data)):
						t.Errorf("%s differs from pip's:\n--- wheel.Install\n%s\n--- pip\n%s", p, clip(a.data), clip(b.data))
					}
				}
			})
		}
	})
}

// readTree maps every regular file under root (through rename) to its content, leaving out
// the installer-specific .dist-info files. Anything that is not a regular file or a
// directory is an error: neither installer may create links or special files here.
func readTree(t *testing.T, root string, rename func(string) string) map[string]installed {
	t.Helper()
	out := map[string]installed{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			t.Errorf("%s in %s is not a regular file (%v)", rel, root, d.Type())
			return nil
		}
		if dir := filepath.Base(filepath.Dir(p)); strings.HasSuffix(dir, ".dist-info") && pipOnly[d.Name()] {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rename(rel)] = installed{data: data, exec: info.Mode()&0o111 != 0}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sansShebang drops the shebang line of a script: it names the interpreter, which differs
// by design (pip writes the running python, pylayer the sandbox's).
func sansShebang(p string, data []byte) []byte {
	if strings.HasPrefix(p, "bin/") && bytes.HasPrefix(data, []byte("#!")) {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			return data[i+1:]
		}
		return nil
	}
	return data
}

func union(a, b map[string]installed) []string {
	seen := map[string]bool{}
	for k := range a {
		seen[k] = true
	}
	for k := range b {
		seen[k] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func keys(m map[string]installed) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func clip(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "..."
	}
	return string(b)
}

func countPrefix(m map[string]installed, prefix string) int {
	n := 0
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}
