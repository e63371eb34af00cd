//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/internal/testenv"
)

// TestGuardBytecode: the first session on a support tree compiles the guard with its
// interpreter; it and later sessions import the guard from that .pyc, which no later
// session compiles again; the guard works the same from it.
func TestGuardBytecode(t *testing.T) {
	testenv.Integration(t, "bwrap")
	support := filepath.Join(sharedDir(t), "sandbox")
	const fromPyc = "code object from '/opt/pylayer/guard/__pycache__/sitecustomize.cpython-"
	for i := range 2 {
		res := run(t, Spec{Support: support, Command: []string{"python3", "-v", "-c", "import pip"}}, RunOptions{})
		if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "pip is disabled in this sandbox") {
			t.Errorf("run %d: pip was not refused: exit %d\n%s", i, res.ExitCode, res.Stderr)
		}
		if !strings.Contains(string(res.Stderr), fromPyc) {
			t.Errorf("run %d: the guard was not imported from its bytecode:\n%s", i, res.Stderr)
		}
	}
	s := Spec{Support: support}
	dir, err := guardPycDir(s)
	if err != nil {
		t.Fatal(err)
	}
	pycs, _ := filepath.Glob(filepath.Join(dir, "sitecustomize.cpython-*.pyc"))
	if len(pycs) != 1 {
		t.Fatalf("%s holds %v, want one .pyc", dir, pycs)
	}
	fi, err := os.Stat(pycs[0])
	if err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("%s: %v, %v; want mode 0444", pycs[0], fi.Mode(), err)
	}
	entries, _ := os.ReadDir(support)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("%s left in %s", e.Name(), support)
		}
	}
}

// TestGuardBytecodeUnusable: when the guard's bytecode directory cannot be used (here a
// file in its place), sessions run the guard from source, as without one.
func TestGuardBytecodeUnusable(t *testing.T) {
	testenv.Integration(t, "bwrap")
	support := filepath.Join(sharedDir(t), "sandbox")
	if _, err := ensureSupport(t.Context(), support); err != nil {
		t.Fatal(err)
	}
	dir, err := guardPycDir(Spec{Support: support})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := run(t, Spec{Support: support, Command: []string{"python3", "-v", "-c", "import pip"}}, RunOptions{})
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "pip is disabled in this sandbox") ||
		!strings.Contains(string(res.Stderr), "code object from /opt/pylayer/guard/sitecustomize.py") {
		t.Errorf("exit %d; want pip refused by the guard run from source:\n%s", res.ExitCode, res.Stderr)
	}
}
