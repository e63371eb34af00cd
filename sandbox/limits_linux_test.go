//go:build linux

package sandbox

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/internal/testenv"
)

// TestRunLimits: the session's command, and what it starts, run under the Limits as
// hard rlimits that nothing inside can raise.
func TestRunLimits(t *testing.T) {
	testenv.Integration(t, "bwrap")
	const code = `import json, resource, subprocess
names = ["NPROC", "AS", "NOFILE", "FSIZE", "CORE", "CPU"]
out = {n: list(resource.getrlimit(getattr(resource, "RLIMIT_" + n))) for n in names}
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (334, 334)); out["raised"] = True
except (ValueError, OSError):
    out["raised"] = False
out["child"] = subprocess.run(["sh", "-c", "ulimit -Hn"], capture_output=True, text=True).stdout.strip()
print(json.dumps(out))`
	lim := Limits{Processes: 77, Memory: 1 << 30, CPU: 5 * time.Second, OpenFiles: 333, FileSize: 1 << 22}
	res := run(t, Spec{Command: py(code), Limits: lim}, RunOptions{})
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	var got map[string]any
	if err := json.Unmarshal(res.Stdout, &got); err != nil {
		t.Fatalf("%v: %s", err, res.Stdout)
	}
	want := map[string][2]float64{"NPROC": {77, 77}, "AS": {1 << 30, 1 << 30}, "NOFILE": {333, 333},
		"FSIZE": {1 << 22, 1 << 22}, "CORE": {0, 0}, "CPU": {5, 6}}
	for n, w := range want {
		g, _ := got[n].([]any)
		if len(g) != 2 || g[0] != w[0] || g[1] != w[1] {
			t.Errorf("RLIMIT_%s = %v, want %v", n, got[n], w)
		}
	}
	if got["raised"] != false || got["child"] != "333" {
		t.Errorf("raising the hard limit: %v; a child's hard NOFILE: %v; want false and 333", got["raised"], got["child"])
	}
}

// TestRunLimitsRefused: limits the kernel refuses to set (a hard limit above the
// caller's own) stop the session before its command runs, saying which.
func TestRunLimitsRefused(t *testing.T) {
	testenv.Integration(t, "bwrap")
	ws := sharedDir(t)
	s := Spec{Workspace: ws, Command: []string{"sh", "-c", "echo ran > /workspace/ran"}, Limits: Limits{OpenFiles: 1 << 30}}
	res := run(t, s, RunOptions{})
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "NOFILE") {
		t.Errorf("exit %d, stderr %q; want a failure naming NOFILE", res.ExitCode, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Error("the command ran without its limits")
	}
}
