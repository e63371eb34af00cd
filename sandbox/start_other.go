//go:build !linux

package sandbox

import (
	"context"
	"io"
)

// StartOptions controls Start.
type StartOptions struct{ User, ID string }

// Process is a sandboxed command started by Start; Start needs Linux.
type Process struct{}

// Start needs Linux.
func Start(ctx context.Context, bwrap string, s Spec, o StartOptions) (*Process, error) {
	return nil, errNotLinux
}

func (p *Process) ID() string            { return "" }
func (p *Process) Identity() Identity    { return Identity{} }
func (p *Process) PID() int              { return 0 }
func (p *Process) Stdin() io.WriteCloser { return nil }
func (p *Process) Stdout() io.ReadCloser { return nil }
func (p *Process) Stderr() io.ReadCloser { return nil }
func (p *Process) Done() <-chan struct{} { return nil }
func (p *Process) Wait() error           { return errNotLinux }
func (p *Process) ExitCode() int         { return -1 }
func (p *Process) Kill() error           { return errNotLinux }
