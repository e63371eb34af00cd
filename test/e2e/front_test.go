package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFrontEnd: pylayer, the front end make build installs, answers --version and runs
// sessions itself, and hands every other command line, unchanged, to pylayer-full beside
// it; without pylayer-full it still runs sessions and says what is missing for the rest.
func TestFrontEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	front := pylayer(t)
	full := filepath.Join(filepath.Dir(front), "pylayer-full")
	cacheDir := t.TempDir()
	call := func(bin string, args ...string) result {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "PYLAYER_CACHE="+cacheDir)
		return runResult(t, cmd, args)
	}

	v, fv := call(front, "--version"), call(full, "--version")
	if v.code != 0 || !strings.HasPrefix(v.stdout, "pylayer version ") || v.stdout != fv.stdout {
		t.Fatalf("--version: front %q (exit %d), full %q", v.stdout, v.code, fv.stdout)
	}
	// help lists every command: the full binary's tree answers it.
	h := call(front, "--help")
	for _, c := range []string{"serve", "publish", "run", "token"} {
		if h.code != 0 || !strings.Contains(h.stdout, "\n  "+c+" ") {
			t.Errorf("pylayer --help (exit %d) does not list %s:\n%s%s", h.code, c, h.stdout, h.stderr)
		}
	}
	// A handed-over command keeps its arguments and its exit status.
	if r := call(front, "--json", "ls"); r.code != 0 || !strings.HasPrefix(strings.TrimSpace(r.stdout), "[") {
		t.Errorf("pylayer --json ls: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}
	if r := call(front, "no-such-command"); r.code != 1 || !strings.Contains(r.stderr, `unknown command "no-such-command"`) {
		t.Errorf("pylayer no-such-command: exit %d, %s", r.code, r.stderr)
	}
	// run --session --db needs a store, which only the full binary links: it answers.
	db := filepath.Join(t.TempDir(), "broker.db")
	if r := call(front, "run", "--session", "ses_missing", "--db", db, "--", "true"); r.code != 1 ||
		!strings.Contains(r.stderr, "ses_missing") || strings.Contains(r.stderr, "full pylayer binary") {
		t.Errorf("run --session --db: exit %d, %s", r.code, r.stderr)
	}

	// The front end alone.
	alone := filepath.Join(t.TempDir(), "pylayer")
	b, err := os.ReadFile(front)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	r := call(alone, "ls")
	if r.code != 1 || !strings.Contains(r.stderr, "pylayer-full") || !strings.Contains(r.stderr, filepath.Dir(alone)) {
		t.Errorf("ls without pylayer-full: exit %d, %q", r.code, r.stderr)
	}
	if r := call(alone, "run", "--session", "ses_missing", "--db", db, "--", "true"); r.code != 1 || !strings.Contains(r.stderr, "pylayer-full") {
		t.Errorf("run --session --db without pylayer-full: exit %d, %q", r.code, r.stderr)
	}
	if r := call(alone, "run", "--print-argv", "--", "python3", "-c", "pass"); r.code != 0 || !strings.Contains(r.stdout, "bwrap") {
		t.Errorf("run --print-argv without pylayer-full: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}
}
