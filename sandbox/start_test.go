//go:build linux

package sandbox

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/internal/testenv"
)

func TestStartPipesAndExit(t *testing.T) {
	testenv.Integration(t, "bwrap")
	const code = `import sys
line = sys.stdin.readline()
print(line.strip().upper(), flush=True)
print("to stderr", file=sys.stderr, flush=True)
sys.exit(3)`
	p, err := Start(context.Background(), realBwrap(t), Spec{Command: py(code)}, StartOptions{ID: "start-test"})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer p.Kill()
	if p.PID() <= 0 || p.ExitCode() != -1 {
		t.Fatalf("PID %d, ExitCode %d while running", p.PID(), p.ExitCode())
	}
	if _, err := io.WriteString(p.Stdin(), "hello\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(p.Stdout()).ReadString('\n')
	if err != nil || line != "HELLO\n" {
		t.Fatalf("stdout %q, %v", line, err)
	}
	errOut, _ := io.ReadAll(p.Stderr())
	if !strings.Contains(string(errOut), "to stderr") {
		t.Fatalf("stderr %q", errOut)
	}
	if err := p.Wait(); err == nil {
		t.Fatal("Wait: nil error for exit status 3")
	}
	if p.ExitCode() != 3 {
		t.Fatalf("ExitCode %d, want 3", p.ExitCode())
	}
}

func TestStartKill(t *testing.T) {
	testenv.Integration(t, "bwrap")
	// A child in its own session that would outlive a kill of bwrap's group alone.
	const code = `import subprocess, sys, time
subprocess.Popen(["sleep", "600"], start_new_session=True)
print("up", flush=True)
time.sleep(600)`
	p, err := Start(context.Background(), realBwrap(t), Spec{Command: py(code)}, StartOptions{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	out := bufio.NewReader(p.Stdout())
	if line, err := out.ReadString('\n'); line != "up\n" {
		t.Fatalf("stdout %q, %v", line, err)
	}
	pid := p.PID()
	seen := descendants(pid)
	if len(seen) < 2 {
		t.Fatalf("descendants of bwrap %v: want the sandbox's processes", seen)
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done still open after Kill")
	}
	if rest, err := io.ReadAll(out); err != nil || len(rest) != 0 {
		t.Fatalf("stdout after Kill: %q, %v (want EOF)", rest, err)
	}
	for _, c := range seen {
		if f := statFields(c); len(f) > 0 && f[0] != "Z" {
			t.Errorf("process %d still there (state %s) after Kill", c, f[0])
		}
	}
	if p.ExitCode() != 128+9 {
		t.Errorf("ExitCode %d, want 137 (SIGKILL)", p.ExitCode())
	}
	if err := p.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}
}
