//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Run runs s.Command in a bwrap sandbox and waits for it. bwrap starts with an
// empty environment, in its own process group, and dies with the caller. When
// the timeout passes or ctx is done, every process of the sandbox gets SIGTERM
// and, KillGrace later, the sandbox is killed whole (bwrap's process group, and
// with it bwrap's pid namespace). A command that fails or times out is not an
// error: see Result. When ctx ends the run, Run returns the Result and an error
// wrapping ctx.Err().
func Run(ctx context.Context, bwrap string, s Spec, o RunOptions) (*Result, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	args, err := Argv(bwrap, s)
	if err != nil {
		return nil, err
	}
	if err := checkExists(s); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sandbox run %s: %w", o.ID, err)
	}
	data, err := dataPipes()
	if err != nil {
		return nil, err
	}
	defer closeAll(data)

	stdout := &capture{max: o.MaxOutput}
	stderr := &capture{max: o.MaxOutput}
	cmd := &exec.Cmd{
		Path: bwrap, Args: args,
		Env:    []string{}, // nothing of the caller's environment reaches bwrap
		Dir:    "/",
		Stdin:  o.Stdin,
		Stdout: stdout, Stderr: stderr,
		ExtraFiles:  data,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
		WaitDelay:   max(o.KillGrace, time.Second),
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bwrap, err)
	}
	closeAll(data)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	res := &Result{ID: o.ID}
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

	var ee *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		res.ExitCode = ws.ExitStatus()
		if ws.Signaled() {
			res.ExitCode = 128 + int(ws.Signal())
		}
	case errors.Is(waitErr, exec.ErrWaitDelay):
		// The sandbox is gone; only its output pipes were held open too long.
	default:
		return res, fmt.Errorf("sandbox run %s: waiting for bwrap: %w", o.ID, waitErr)
	}
	if res.ExitCode > 128 && res.ExitCode <= 128+64 {
		res.Signal = unix.SignalName(syscall.Signal(res.ExitCode - 128))
	}
	if ctxErr != nil {
		return res, fmt.Errorf("sandbox run %s: %w", o.ID, ctxErr)
	}
	return res, nil
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
	seen := snapshot(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	signalTree(pid, syscall.SIGKILL, true)
	err := <-done
	waitGone(seen, 5*time.Second)
	return err
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

// dataPipes returns pipes already holding DataFiles, write ends closed.
func dataPipes() ([]*os.File, error) {
	var out []*os.File
	for _, d := range DataFiles() {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("creating a pipe for bwrap: %w", err)
		}
		out = append(out, r)
		// Every file is far below the smallest pipe capacity (one page), so the
		// write cannot block.
		_, err = w.Write(d)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("writing a pipe for bwrap: %w", err)
		}
	}
	return out, nil
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
