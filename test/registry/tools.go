package registrytest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Tool returns the path of a stock CLI the tests drive ("cosign", "crane"): the file named
// by $PYLAYER_<NAME> (e.g. PYLAYER_COSIGN) when set, else what scripts/tools.sh prints,
// which builds the pinned version once into ${PYLAYER_TOOLS:-~/.cache/pylayer/tools}.
// A missing tool fails the test; it never skips.
func Tool(t testing.TB, name string) string {
	t.Helper()
	if p := os.Getenv("PYLAYER_" + strings.ToUpper(name)); p != "" {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			t.Fatalf("$PYLAYER_%s=%s is not an executable file (%v)", strings.ToUpper(name), p, err)
		}
		return p
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("finding scripts/tools.sh: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "tools.sh"), name)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/tools.sh %s: %v\n%s", name, err, stderr.String())
	}
	p := strings.TrimSpace(string(out))
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("scripts/tools.sh %s printed %q, not an executable (%v)", name, p, err)
	}
	return p
}

// repoRoot walks up from the working directory to pylayer's go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/pylayer/pylayer\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of github.com/pylayer/pylayer above the working directory")
		}
		dir = parent
	}
}
