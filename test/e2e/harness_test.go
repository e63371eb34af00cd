package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pylayer/pylayer/internal/testenv"
	registrytest "github.com/pylayer/pylayer/test/registry"
)

// The process harness the suites share: a goroutine-safe buffer for a child's stderr,
// servers that print their URL on stdout once they listen, and pylayer runs collected
// into a result.

// syncBuf is a goroutine-safe buffer for a child's stderr.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuf) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuf) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// child is a started server process (pylayer index serve, pylayer serve).
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
}

// startChild starts cmd, which prints one line (its URL) on stdout once it listens, and
// waits up to 60s for that line; ok is false when it printed none. The child dies with the
// test binary; stderr goes to a syncBuf unless cmd.Stderr is set. Stop it with stop.
func startChild(cmd *exec.Cmd) (c *child, line string, ok bool, err error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if cmd.Stderr == nil {
		cmd.Stderr = &syncBuf{}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", false, err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", false, fmt.Errorf("starting %v: %w", cmd.Args, err)
	}
	c = &child{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(c.done) }()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- strings.TrimSpace(sc.Text())
		}
		close(lines)
		io.Copy(io.Discard, stdout)
	}()
	select {
	case line, ok = <-lines:
	case <-time.After(60 * time.Second):
	}
	return c, line, ok, nil
}

// stop sends SIGTERM, waits up to grace for the child to exit, then kills it. It may be
// called again once the child is gone.
func (c *child) stop(grace time.Duration) {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		c.cmd.Process.Kill()
		<-c.done
	}
}

// startServer starts cmd with startChild, stops it (SIGTERM, SIGKILL after grace) when the
// test ends, and fails the test unless it printed a loopback URL, which it returns.
func startServer(t testing.TB, cmd *exec.Cmd, grace time.Duration) (*child, string) {
	t.Helper()
	c, url, ok, err := startChild(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop(grace) })
	if !ok {
		t.Fatalf("%v printed nothing; stderr:\n%s", cmd.Args, cmd.Stderr)
	}
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("%v printed %q, want its URL http://127.0.0.1:PORT; stderr:\n%s", cmd.Args, url, cmd.Stderr)
	}
	return c, url
}

// serveIndex runs pylayer index serve DIR on a free loopback port until the test ends and
// returns its index URL, http://127.0.0.1:PORT/simple/.
func serveIndex(t testing.TB, dir string) string {
	t.Helper()
	cmd := exec.Command(pylayer(t), "index", "serve", dir, "--listen", "127.0.0.1:0")
	_, url := startServer(t, cmd, 10*time.Second)
	if !strings.HasSuffix(url, "/simple/") {
		t.Fatalf("pylayer index serve %s printed %q, want http://127.0.0.1:PORT/simple/; stderr:\n%s", dir, url, cmd.Stderr)
	}
	return url
}

// runResult runs cmd, a pylayer run with args, and collects its output and exit code;
// failing to run it at all fails the test.
func runResult(t testing.TB, cmd *exec.Cmd, args []string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("running pylayer %v: %v", args, err)
	}
	return r
}

// ciRegistry starts what the registry suites begin with: a real registry (TLS, htpasswd
// auth), the suite's lock files (locks), and a CI host logged in to the registry holding
// the signing key "ci" (its private and public halves).
func ciRegistry(ctx context.Context, t testing.TB) (r *registrytest.Registry, lk map[string]string, ci *host, priv, pub string) {
	t.Helper()
	r = registrytest.Start(t, registrytest.Options{})
	lk = locks(t)
	ci = newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
	priv, pub = ci.keygen(ctx, t, "ci")
	return r, lk, ci, priv, pub
}

// sharedDir is testenv.SharedDir: a directory the sandbox user can enter.
func sharedDir(t testing.TB) string { return testenv.SharedDir(t) }
