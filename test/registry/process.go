package registrytest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is the registry child: in its own process group (a terminal's ^C goes to the test
// binary, which then stops it in order), killed by the kernel if the test binary dies
// (Pdeathsig). docker-registry spawns no children, so signals go to its pid only, through
// os.Process (pidfd-based: never a reused pid).
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the child has exited; err is set then
	err  error
}

// startProcess runs `argv... serve config` (argv: the registry binary, after a prefix
// that execs it, if any) with stdout and stderr appended to logPath. The
// environment is cleared: distribution reads REGISTRY_* variables as config overrides, and
// nothing from the test's environment may change where it listens or what it trusts.
func startProcess(argv []string, config, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the registry log: %w", err)
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(argv[0], append(argv[1:], "serve", config)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM, SIGKILL after 10s, and waits for the exit. Death by either signal
// is the expected way out and not an error.
func (p *process) stop() error {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() &&
			(ws.Signal() == syscall.SIGTERM || ws.Signal() == syscall.SIGKILL) {
			return nil
		}
	}
	if p.err != nil {
		return fmt.Errorf("docker-registry: %w", p.err)
	}
	return nil
}

func containsAddrInUse(logPath string) bool {
	b, _ := os.ReadFile(logPath)
	return bytes.Contains(b, []byte("address already in use"))
}

// logTail is the last n lines of the registry log, for failure messages.
func (r *Registry) logTail(n int) string {
	b, err := os.ReadFile(r.logPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", r.logPath, err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
