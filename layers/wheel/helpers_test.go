package wheel

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/test/fixture"
)

// python3 is the oracle interpreter (pip 23.2 with packaging 21.3 vendored).
func python3(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/root/.pyenv/shims/python3"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is required as the test oracle: %v", err)
	}
	return p
}

// compileInterpreter is a real CPython 3.11 binary for .pyc tests.
func compileInterpreter(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/root/.pyenv/versions/3.11.7/bin/python3.11", "/usr/bin/python3.11"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("a python3.11 interpreter is required (/root/.pyenv/versions/3.11.7/bin/python3.11 or /usr/bin/python3.11)")
	return ""
}

// compileInterpreters is compileInterpreter and, beside it, every other CPython 3.10 or
// later of the machine's pyenv: the compile server must match a fresh process on each.
func compileInterpreters(t testing.TB) []string {
	t.Helper()
	interps := []string{compileInterpreter(t)}
	if interps[0] != "/usr/bin/python3.11" {
		interps = append(interps, "/usr/bin/python3.11")
	}
	found, _ := filepath.Glob("/root/.pyenv/versions/3.*/bin/python3")
	for _, p := range found {
		v := strings.TrimPrefix(filepath.Base(filepath.Dir(filepath.Dir(p))), "3.")
		minor, _, _ := strings.Cut(v, ".")
		if n, err := strconv.Atoi(minor); err == nil && n >= 10 && !strings.HasPrefix(interps[0], filepath.Dir(filepath.Dir(p))+"/") {
			interps = append(interps, p)
		}
	}
	return interps
}

// runPython runs script with python and returns stdout, failing the test on error.
func runPython(t testing.TB, py string, stdin []byte, script string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(py, append([]string{"-c", script}, args...)...)
	cmd.Env = append(os.Environ(), "PIP_CONFIG_FILE=/dev/null", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("python %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes()
}

func writeWheel(t testing.TB, w fixture.Wheel) string {
	t.Helper()
	p, err := w.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// writeZip writes members as a wheel archive named name.
func writeZip(t testing.TB, name string, members []fixture.File) string {
	t.Helper()
	b, err := fixture.Zip(members)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func installT(t testing.TB, whl string, opts InstallOptions) (string, *Installed) {
	t.Helper()
	dest := filepath.Join(t.TempDir(), "tree")
	inst, err := Install(context.Background(), whl, dest, opts)
	if err != nil {
		t.Fatal(err)
	}
	return dest, inst
}

// treeFile is one file of an installed tree.
type treeFile struct {
	data []byte
	mode fs.FileMode
}

// readTree reads every regular file under dir, failing on anything else but directories.
func readTree(t testing.TB, dir string) map[string]treeFile {
	t.Helper()
	out := map[string]treeFile{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			if info.Mode().Perm() != 0o755 && rel != "." {
				t.Errorf("%s: dir mode %v", rel, info.Mode())
			}
			return nil
		}
		if !info.Mode().IsRegular() {
			t.Errorf("%s: not a regular file: %v", rel, info.Mode())
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = treeFile{data, info.Mode()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
