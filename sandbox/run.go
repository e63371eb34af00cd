//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// Run runs s.Command in a bwrap sandbox and waits for it. bwrap starts with an
// empty environment, in its own process group, and dies with the caller.
//
// When the caller is root, bwrap and the session run as an unprivileged host
// user (HostIdentity), never as root: the workspace directory is handed to that
// user, and every directory bwrap binds must be reachable by it (Run checks, and
// says what to change). The workspace is resolved without following any
// symlink (see checkWorkspace). The session's resource limits (Spec.Limits)
// are set by its first program, Prlimit.
//
// When the timeout passes or ctx is done, every process of the sandbox gets
// SIGTERM and, KillGrace later, the sandbox is killed whole (bwrap's process
// group, and with it bwrap's pid namespace). A command that fails or times out
// is not an error: see Result. When ctx ends the run, Run returns the Result
// and an error wrapping ctx.Err().
func Run(ctx context.Context, bwrap string, s Spec, o RunOptions) (*Result, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	l, err := prepare(ctx, bwrap, s, o.User, o.ID)
	if err != nil {
		return nil, err
	}
	defer l.fds.close()

	stdout := &capture{max: o.MaxOutput}
	stderr := &capture{max: o.MaxOutput}
	cmd := l.cmd
	cmd.Stdin = noTerminal(o.Stdin)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = max(o.KillGrace, time.Second)
	lim, ident := l.lim, l.ident
	start := time.Now()
	if err := l.start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	res := &Result{ID: o.ID, Identity: ident}
	timer := time.NewTimer(o.Timeout)
	defer timer.Stop()
	var waitErr, ctxErr error
	select {
	case waitErr = <-done:
	case <-timer.C:
		res.TimedOut = true
	case <-ctx.Done():
		ctxErr = ctx.Err()
	}
	if res.TimedOut || ctxErr != nil {
		select {
		case waitErr = <-done: // it ended just now: nothing to stop
		default:
			waitErr = stop(cmd.Process.Pid, o.KillGrace, done)
		}
	}
	res.Duration = time.Since(start)
	res.Stdout, res.StdoutTruncated = stdout.result()
	res.Stderr, res.StderrTruncated = stderr.result()

	res.ExitCode, err = exitCode(waitErr)
	if err != nil {
		return res, fmt.Errorf("sandbox run %s: waiting for bwrap: %w", o.ID, err)
	}
	if res.ExitCode > 128 && res.ExitCode <= 128+64 {
		sig := syscall.Signal(res.ExitCode - 128)
		res.Signal = unix.SignalName(sig)
		switch sig {
		case syscall.SIGXCPU:
			res.Limit = fmt.Sprintf("CPU time limit (%s per process)", lim.CPU)
		case syscall.SIGXFSZ:
			res.Limit = fmt.Sprintf("file size limit (%d bytes)", lim.FileSize)
		}
	}
	if ctxErr != nil {
		return res, fmt.Errorf("sandbox run %s: %w", o.ID, ctxErr)
	}
	return res, nil
}

// reachable checks that the sandbox user can reach every host directory of s.
func reachable(s Spec, ident Identity) error {
	if s.Interpreter != "" {
		if err := checkReachable("interpreter", s.Interpreter, ident); err != nil {
			return err
		}
	}
	for i, l := range s.Layers {
		if err := checkReachable(fmt.Sprintf("layer %d (%s)", i, l.Kind), l.Root, ident); err != nil {
			return err
		}
	}
	if s.Support != "" {
		if err := checkReachable("support tree", supportPath(s.Support), ident); err != nil {
			return err
		}
	}
	if s.guardPyc != "" {
		if err := checkReachable("the guard's bytecode", s.guardPyc, ident); err != nil {
			return err
		}
	}
	if s.Workspace != "" {
		return checkReachable("workspace", filepath.Dir(s.Workspace), ident)
	}
	return nil
}

// noTerminal keeps the host's terminal out of the sandbox: sessions are not
// interactive, so a terminal given as stdin is replaced by /dev/null (nil), and
// nothing inside can reach the terminal device (TIOCSTI, job control) or read
// what the user types.
func noTerminal(in io.Reader) io.Reader {
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return in
}

// stop terminates the sandbox of bwrap process pid and returns cmd.Wait's error.
// SIGTERM goes to the sandboxed processes, not to bwrap: bwrap would die at once
// and take them down with SIGKILL, leaving them no grace. After the SIGKILL, stop
// also waits (briefly) until the processes it saw are gone, so that none outlives
// Run even while the kernel is still tearing down the pid namespace.
func stop(pid int, grace time.Duration, done <-chan error) error {
	signalTree(pid, syscall.SIGTERM, false)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	}
	// bwrap has not been reaped (done is empty), so its pid and process group id
	// are still ours.
	return killAll(pid, func() error { return <-done })
}

// killAll kills the sandbox of bwrap process pid at once, whole: bwrap's process
// group and every process below bwrap. wait reaps bwrap and returns cmd.Wait's
// error; killAll then waits (briefly) until the processes it saw are gone, so
// that none outlives the caller's call while the kernel is still tearing down
// the pid namespace. bwrap must not have been reaped yet: its pid and process
// group id are then still the caller's.
func killAll(pid int, wait func() error) error {
	seen := snapshot(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	signalTree(pid, syscall.SIGKILL, true)
	err := wait()
	waitGone(seen, 5*time.Second)
	return err
}

// exitCode decodes cmd.Wait's error: a command ended by signal N gives 128+N,
// as bwrap itself reports its command's signal. An error that is not an exit
// status is returned, except exec.ErrWaitDelay: the sandbox is gone, only its
// output pipes were held open too long.
func exitCode(waitErr error) (int, error) {
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
		return 0, nil
	case errors.As(waitErr, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ws.ExitStatus(), nil
	case errors.Is(waitErr, exec.ErrWaitDelay):
		return 0, nil
	}
	return 0, waitErr
}

// launch is a checked sandbox ready to start: what Run and Start share.
type launch struct {
	bwrap string
	lim   Limits
	ident Identity
	fds   *files
	// cmd runs bwrap with an empty environment, in its own process group, as the
	// session's host identity; the caller sets its standard streams.
	cmd *exec.Cmd
}

// prepare checks s for run id and makes the command that runs it: the Spec's
// plan and limits, its host paths, the host identity (user, see HostIdentity)
// and that it can reach every directory bwrap binds, the workspace, and the
// descriptors the plan passes. The caller closes l.fds.
func prepare(ctx context.Context, bwrap string, s Spec, user, id string) (*launch, error) {
	if s.Support != "" {
		if err := checkHostPath("support", s.Support); err != nil {
			return nil, err
		}
		if _, err := ensureSupport(ctx, s.Support); err != nil {
			return nil, err
		}
		if !s.noGuardPyc {
			s.guardPyc = guardBytecode(ctx, bwrap, s, user)
		}
	}
	plan, err := Build(bwrap, s)
	if err != nil {
		return nil, err
	}
	lim, _ := s.Limits.withDefaults() // Build checked them
	if err := checkExists(s); err != nil {
		return nil, err
	}
	ident, err := HostIdentity(ctx, user)
	if s.unhardened {
		ident, err = Identity{UID: os.Geteuid(), GID: os.Getegid()}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sandbox run %s: %w", id, err)
	}
	if ident.UID != os.Geteuid() {
		if err := reachable(s, ident); err != nil {
			return nil, err
		}
	}
	if s.Workspace != "" {
		if err := checkWorkspace(s.Workspace, ident); err != nil {
			return nil, err
		}
	}
	if err := checkCache(s, ident); err != nil {
		return nil, err
	}
	fds, err := openFiles(plan.Files)
	if err != nil {
		return nil, err
	}
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if ident.UID != os.Geteuid() {
		attr.Credential = &syscall.Credential{Uid: uint32(ident.UID), Gid: uint32(ident.GID), Groups: []uint32{}}
	}
	cmd := &exec.Cmd{
		Path: bwrap, Args: plan.Args,
		Env:         []string{}, // nothing of the caller's environment reaches bwrap
		Dir:         "/",
		ExtraFiles:  fds.child,
		SysProcAttr: attr,
	}
	return &launch{bwrap: bwrap, lim: lim, ident: ident, fds: fds, cmd: cmd}, nil
}

// start starts l.cmd and closes the descriptors bwrap now holds.
func (l *launch) start() error {
	if err := l.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s as %s: %w", l.bwrap, l.ident, err)
	}
	l.fds.close()
	return nil
}

// checkExists checks that the host paths of s exist and have the right type.
func checkExists(s Spec) error {
	isDir := func(field, p string) error {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidSpec, field, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: %s %s: not a directory", ErrInvalidSpec, field, p)
		}
		return nil
	}
	if s.Interpreter != "" {
		if err := isDir("interpreter", s.Interpreter); err != nil {
			return err
		}
		py := filepath.Join(s.Interpreter, "bin", "python3")
		if fi, err := os.Stat(py); err != nil || fi.IsDir() {
			return fmt.Errorf("%w: interpreter %s has no bin/python3: not a CPython prefix", ErrInvalidSpec, s.Interpreter)
		}
	}
	for i, l := range s.Layers {
		if err := isDir(fmt.Sprintf("layer %d (%s %q)", i, l.Kind, l.Name), l.Root); err != nil {
			return err
		}
	}
	if s.Workspace != "" {
		return isDir("workspace", s.Workspace)
	}
	return nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// capture keeps the first max bytes written to it and counts the rest, so that
// the writer never blocks.
type capture struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	max       int64
	truncated bool
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := c.max - int64(c.buf.Len())
	if int64(len(p)) > keep {
		c.truncated = true
		c.buf.Write(p[:max(keep, 0)])
	} else {
		c.buf.Write(p)
	}
	return len(p), nil
}

func (c *capture) result() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := bytes.Clone(c.buf.Bytes())
	if c.truncated {
		out = fmt.Appendf(out, "\n[pylayer: output truncated after %d bytes]\n", c.max)
	}
	return out, c.truncated
}
