//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// StartOptions controls Start. The zero value is usable.
type StartOptions struct {
	// User is the host user sessions run as when the caller is root, as
	// RunOptions.User.
	User string
	// ID names the process in errors ([A-Za-z0-9._-], at most 64), default random.
	ID string
}

// Process is a long-lived sandboxed command started by Start, with pipes to
// its standard streams.
type Process struct {
	id     string
	ident  Identity
	pid    int
	stdin  *os.File
	stdout *os.File
	stderr *os.File

	done    chan struct{}
	waitErr error // set before done is closed

	killMu sync.Mutex
}

// Start starts s.Command in a bwrap sandbox as Run does, with the same checks,
// host identity, hardening and limits, and returns at once: the command's
// standard streams are pipes (Stdin, Stdout, Stderr), and nothing stops it
// but the command itself, Kill, or the end of the calling process (bwrap dies
// with its parent). ctx bounds the start only, not the process's life.
//
// The caller reads Stdout and Stderr until EOF (a pipe not read fills up and
// blocks the command) and closes them, and ends the process with Kill, or Wait
// for it to exit.
func Start(ctx context.Context, bwrap string, s Spec, o StartOptions) (*Process, error) {
	ro, err := RunOptions{User: o.User, ID: o.ID}.withDefaults()
	if err != nil {
		return nil, err
	}
	l, err := prepare(ctx, bwrap, s, ro.User, ro.ID)
	if err != nil {
		return nil, err
	}
	defer l.fds.close()

	// The pipes are *os.File on both sides, so the child holds its ends
	// directly and no copying goroutine of exec.Cmd stands between: the
	// caller reads what the command wrote until the last writer is gone,
	// independently of Wait.
	var ours, theirs []*os.File
	closeAllOnErr := func() { closeAll(ours); closeAll(theirs) }
	for i := 0; i < 3; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			closeAllOnErr()
			return nil, fmt.Errorf("sandbox start %s: creating a pipe: %w", ro.ID, err)
		}
		if i == 0 {
			ours, theirs = append(ours, w), append(theirs, r)
		} else {
			ours, theirs = append(ours, r), append(theirs, w)
		}
	}
	l.cmd.Stdin, l.cmd.Stdout, l.cmd.Stderr = theirs[0], theirs[1], theirs[2]
	if err := l.start(); err != nil {
		closeAllOnErr()
		return nil, err
	}
	closeAll(theirs)
	p := &Process{
		id: ro.ID, ident: l.ident, pid: l.cmd.Process.Pid,
		stdin: ours[0], stdout: ours[1], stderr: ours[2],
		done: make(chan struct{}),
	}
	go func() {
		p.waitErr = l.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// ID is the process's id (StartOptions.ID or the random default).
func (p *Process) ID() string { return p.id }

// Identity is the host user the sandbox runs as.
func (p *Process) Identity() Identity { return p.ident }

// PID is bwrap's host process id (and process group id).
func (p *Process) PID() int { return p.pid }

// Stdin is the write end of the command's standard input.
func (p *Process) Stdin() io.WriteCloser { return p.stdin }

// Stdout is the read end of the command's standard output; EOF once every
// process of the sandbox that held it is gone (or closed it). The caller
// closes it once done with it: nothing else does, and an unclosed pipe is a
// descriptor held until the garbage collector finds it.
func (p *Process) Stdout() io.ReadCloser { return p.stdout }

// Stderr is the read end of the command's standard error (bwrap's own errors
// land here too); the caller closes it, as Stdout.
func (p *Process) Stderr() io.ReadCloser { return p.stderr }

// Done is closed when bwrap has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for bwrap to exit and returns exec.Cmd.Wait's error: nil for
// status 0, an *exec.ExitError otherwise (see ExitCode).
func (p *Process) Wait() error {
	<-p.done
	return p.waitErr
}

// ExitCode is the command's exit status once Done is closed, 128+N for a
// command ended by signal N (as Result.ExitCode), -1 while it runs or when
// waiting for it failed.
func (p *Process) ExitCode() int {
	select {
	case <-p.done:
	default:
		return -1
	}
	code, err := exitCode(p.waitErr)
	if err != nil {
		return -1
	}
	return code
}

// Kill kills the whole sandbox at once (SIGKILL to bwrap's process group and
// every process below bwrap), reaps bwrap, and waits briefly until the
// processes it saw are gone. It then closes Stdin; Stdout and Stderr give EOF
// once drained. Killing a process that has exited does nothing.
func (p *Process) Kill() error {
	p.killMu.Lock()
	defer p.killMu.Unlock()
	select {
	case <-p.done:
	default:
		// Done is open, so bwrap has not been reaped: its pid is still ours.
		_ = killAll(p.pid, p.Wait)
	}
	if err := p.stdin.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("sandbox %s: closing stdin: %w", p.id, err)
	}
	return nil
}
