package executor

import (
	"context"
	"errors"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/sandbox"
	"github.com/pylayer/pylayer/sandbox/kernel"
)

// kernelStarter starts sandbox/kernel processes: the session's interpreter running
// the kernel's driver in the sandbox spec describes.
func kernelStarter(bwrap, user string, maxOutput int64) func(context.Context, sandbox.Spec) (kernelProc, error) {
	return func(ctx context.Context, spec sandbox.Spec) (kernelProc, error) {
		k, err := kernel.Start(ctx, kernel.Options{Bwrap: bwrap, Spec: spec, User: user, MaxOutput: maxOutput})
		if err != nil {
			return nil, err
		}
		return kernelAdapter{k}, nil
	}
}

// kernelAdapter gives a *kernel.Kernel the broker's types.
type kernelAdapter struct{ k *kernel.Kernel }

func (a kernelAdapter) Exec(ctx context.Context, code string, timeout time.Duration, emit func(broker.ExecEvent)) (broker.ExecResult, string, error) {
	r, err := a.k.Exec(ctx, code, timeout, func(e kernel.Event) {
		if emit != nil {
			emit(broker.ExecEvent{Type: e.Kind, Name: e.Name, Text: e.Text, MIME: e.MIME, Data: e.Data})
		}
	})
	if errors.Is(err, kernel.ErrDead) {
		return broker.ExecResult{Status: broker.RunError}, dead(true, a.k.DeadReason()), nil
	}
	if err != nil {
		return broker.ExecResult{}, "", err
	}
	res := broker.ExecResult{Status: r.Status, Stdout: r.Stdout, Stderr: r.Stderr,
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated,
		Outputs: make([]broker.Output, 0, len(r.Outputs)), OutputsTruncated: r.OutputsTruncated,
		DurationMS: r.Duration.Milliseconds()}
	if r.EName != "" || len(r.Traceback) > 0 {
		res.Error = &broker.ExecError{EName: r.EName, EValue: r.EValue, Traceback: r.Traceback}
	}
	for _, o := range r.Outputs {
		res.Outputs = append(res.Outputs, broker.Output{MIME: o.MIME, Data: o.Data})
	}
	return res, dead(r.Dead, r.DeadReason), nil
}

func (a kernelAdapter) Shell(ctx context.Context, command string, timeout time.Duration) (broker.ShellResult, string, error) {
	r, err := a.k.Shell(ctx, command, timeout)
	if errors.Is(err, kernel.ErrDead) {
		return broker.ShellResult{Status: broker.RunError, ExitCode: -1}, dead(true, a.k.DeadReason()), nil
	}
	if err != nil {
		return broker.ShellResult{}, "", err
	}
	return broker.ShellResult{Status: r.Status, ExitCode: r.ExitCode, Stdout: r.Stdout, Stderr: r.Stderr,
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated,
		DurationMS: r.Duration.Milliseconds()}, dead(r.Dead, r.DeadReason), nil
}

func (a kernelAdapter) Ping(ctx context.Context) error { return a.k.Ping(ctx) }
func (a kernelAdapter) Close() error                   { return a.k.Close() }
func (a kernelAdapter) Done() <-chan struct{}          { return a.k.Done() }
func (a kernelAdapter) PID() int                       { return a.k.PID() }

// dead is the reason of a process the kernel reports gone, "" while it lives.
func dead(gone bool, reason string) string {
	switch {
	case !gone:
		return ""
	case reason == "":
		return "the process exited"
	}
	return reason
}
