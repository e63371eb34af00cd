package kernel

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Statuses of Result and ShellResult.
const (
	StatusOK        = "ok"
	StatusError     = "error"
	StatusTimeout   = "timeout"
	StatusCancelled = "cancelled"
)

// Event is what a running cell produces, as it happens: Kind "stream" (Name
// "stdout" or "stderr", Text) or "display" (MIME, Data; base64 for binary
// types such as image/png).
type Event struct{ Kind, Name, Text, MIME, Data string }

// Output is one rich output of a cell: the last expression's value
// (text/plain, its repr), a display() call or a matplotlib figure (image/png,
// base64).
type Output struct{ MIME, Data string }

// Result is the outcome of a cell.
type Result struct {
	// Status is StatusOK, StatusError (an exception, see EName), StatusTimeout
	// or StatusCancelled (the cell was interrupted; the state is kept unless
	// Dead).
	Status string
	// Stdout and Stderr hold at most Options.MaxOutput bytes each, followed by
	// a marker line when cut.
	Stdout, Stderr                   string
	StdoutTruncated, StderrTruncated bool
	// EName, EValue and Traceback describe the exception that ended the cell
	// (KeyboardInterrupt after an interrupt); the traceback starts in the cell.
	EName, EValue string
	Traceback     []string
	// Outputs are the cell's rich outputs in order, at most MaxOutputs bytes.
	Outputs          []Output
	OutputsTruncated bool
	Duration         time.Duration
	// Dead: the process is gone (killed after ignoring the interrupt, or
	// crashed); DeadReason says which. The kernel is then unusable: Done is
	// closed and every later call gives ErrDead.
	Dead       bool
	DeadReason string
}

// ShellResult is the outcome of a shell command.
type ShellResult struct {
	Status                           string // StatusOK (whatever the exit code), StatusTimeout, StatusCancelled, StatusError
	ExitCode                         int    // 128+N for a command killed by signal N; -1 if it did not run
	Stdout, Stderr                   string
	StdoutTruncated, StderrTruncated bool
	Duration                         time.Duration
	Dead                             bool
	DeadReason                       string
}

// Exec runs code as a cell in the kernel and waits for it. emit, if not nil,
// gets the cell's events as they come, from another goroutine, one at a time
// and never after Exec has returned; it must not block long (the cell's
// output waits for it) nor call the kernel's methods itself (Ping would wait
// for an answer that the goroutine running emit delivers). A display event
// comes for every Output, the last expression's value included.
//
// When timeout (if > 0) passes or ctx is done, the cell is interrupted
// (KeyboardInterrupt) and the Result says StatusTimeout or StatusCancelled;
// the state is kept. A cell still running Options.Grace after the interrupt
// gets its process killed, and the Result says Dead, as it does when the
// process crashes. The error is for what is not the cell's doing: ErrBusy,
// ErrDead (the kernel was already gone).
func (k *Kernel) Exec(ctx context.Context, code string, timeout time.Duration, emit func(Event)) (Result, error) {
	if !k.busy.CompareAndSwap(false, true) {
		return Result{}, ErrBusy
	}
	defer k.busy.Store(false)
	start := time.Now()
	c := k.begin("r", emit)
	defer k.end(c)
	m, interrupted, err := k.await(ctx, c, request{
		Op: "exec", ID: c.id, Code: code, MaxOutput: k.o.MaxOutput, MaxOutputs: MaxOutputs,
	}, timeout)
	if err != nil {
		return Result{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.finished = true
	res := Result{
		Status: StatusError, Duration: time.Since(start),
		Stdout: c.stdout.String(), Stderr: c.stderr.String(),
		StdoutTruncated: c.stdoutCut, StderrTruncated: c.stderrCut,
		Outputs: c.outputs, OutputsTruncated: c.outputsCut,
	}
	if m != nil {
		res.Status = m.Status
		res.EName, res.EValue, res.Traceback = m.EName, m.EValue, m.Traceback
		res.StdoutTruncated = res.StdoutTruncated || m.StdoutTruncated
		res.StderrTruncated = res.StderrTruncated || m.StderrTruncated
		res.OutputsTruncated = res.OutputsTruncated || m.OutputsTruncated
	} else {
		res.Dead, res.DeadReason = true, k.reason
	}
	if interrupted != "" {
		res.Status = interrupted
	}
	return res, nil
}

// Shell runs /bin/sh -c command in the kernel's sandbox, in its own process
// group, with the kernel's working directory and environment, and waits for
// it. When timeout (if > 0) passes the driver kills the command's process
// group (StatusTimeout); when ctx is done it is interrupted and killed
// (StatusCancelled). Output is captured, not streamed, and capped as a cell's.
func (k *Kernel) Shell(ctx context.Context, command string, timeout time.Duration) (ShellResult, error) {
	if !k.busy.CompareAndSwap(false, true) {
		return ShellResult{}, ErrBusy
	}
	defer k.busy.Store(false)
	start := time.Now()
	c := k.begin("s", nil)
	defer k.end(c)
	// The driver keeps the timeout; this side's is a backstop for a driver that
	// does not answer.
	backstop := time.Duration(0)
	if timeout > 0 {
		backstop = timeout + k.o.Grace
	}
	m, interrupted, err := k.await(ctx, c, request{
		Op: "shell", ID: c.id, Command: command, Timeout: timeout.Seconds(), MaxOutput: k.o.MaxOutput,
	}, backstop)
	if err != nil {
		return ShellResult{}, err
	}
	c.mu.Lock()
	c.finished = true
	c.mu.Unlock()
	res := ShellResult{Status: StatusError, ExitCode: -1, Duration: time.Since(start)}
	if m != nil {
		res.Status, res.ExitCode = m.Status, m.ExitCode
		res.Stdout, res.Stderr = m.Stdout, m.Stderr
		res.StdoutTruncated, res.StderrTruncated = m.StdoutTruncated, m.StderrTruncated
	} else {
		res.Dead, res.DeadReason = true, k.reason
	}
	if interrupted != "" {
		res.Status = interrupted
	}
	return res, nil
}

// call is one Exec or Shell while it runs.
type call struct {
	id     string
	emit   func(Event)
	max    int64
	result chan message

	mu                   sync.Mutex
	finished             bool // Exec has returned: no more emits
	stdout, stderr       strings.Builder
	stdoutCut, stderrCut bool
	outputs              []Output
	outputsSize          int
	outputsCut           bool
}

func (k *Kernel) begin(prefix string, emit func(Event)) *call {
	c := &call{
		id:   prefix + strconv.FormatUint(k.seq.Add(1), 10),
		emit: emit, max: k.o.MaxOutput,
		result: make(chan message, 1),
	}
	k.mu.Lock()
	k.cur = c
	k.mu.Unlock()
	return c
}

func (k *Kernel) end(c *call) {
	k.mu.Lock()
	if k.cur == c {
		k.cur = nil
	}
	k.mu.Unlock()
}

// handle takes one event of c's run, in the reader goroutine.
func (c *call) handle(m message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		return
	}
	switch m.Ev {
	case "stream":
		// The driver caps each stream and says so in the text; this is a
		// backstop with room for its marker.
		b, cut := &c.stdout, &c.stdoutCut
		if m.Name == "stderr" {
			b, cut = &c.stderr, &c.stderrCut
		}
		if room := int(c.max) + 256 - b.Len(); len(m.Text) > room {
			m.Text = m.Text[:max(room, 0)]
			*cut = true
		}
		b.WriteString(m.Text)
		if c.emit != nil && m.Text != "" {
			c.emit(Event{Kind: "stream", Name: m.Name, Text: m.Text})
		}
	case "display":
		if c.outputsSize+len(m.Data) > MaxOutputs {
			c.outputsCut = true
			return
		}
		c.outputsSize += len(m.Data)
		c.outputs = append(c.outputs, Output{MIME: m.MIME, Data: m.Data})
		if c.emit != nil {
			c.emit(Event{Kind: "display", MIME: m.MIME, Data: m.Data})
		}
	case "result", "shell_result":
		select {
		case c.result <- m:
		default:
		}
	}
}

// await sends req and waits for its result. When timeout (if > 0) passes or
// ctx is done it interrupts the run (interrupted says which); Grace later it
// kills the process. A nil message: the process is gone.
func (k *Kernel) await(ctx context.Context, c *call, req request, timeout time.Duration) (m *message, interrupted string, err error) {
	if err := k.send(req); err != nil {
		select {
		case <-k.done:
			return nil, "", fmt.Errorf("%w: %s", ErrDead, k.reason)
		default:
		}
		// The pipe broke under a process still going: it is dying now.
		t := time.NewTimer(k.o.Grace)
		defer t.Stop()
		select {
		case <-k.done:
		case <-t.C:
			k.kill("the kernel's pipe broke")
			<-k.done
		}
		return nil, "", nil
	}
	var timer, grace <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	ctxDone := ctx.Done()
	var graceTimer *time.Timer
	defer func() {
		if graceTimer != nil {
			graceTimer.Stop()
		}
	}()
	interrupt := func(status string) {
		interrupted, timer, ctxDone = status, nil, nil
		_ = k.send(request{Op: "interrupt", ID: c.id}) // a dead process shows as done
		graceTimer = time.NewTimer(k.o.Grace)
		grace = graceTimer.C
	}
	for {
		select {
		case r := <-c.result:
			return &r, interrupted, nil
		case <-k.done:
			select {
			case r := <-c.result: // it answered before it went
				return &r, interrupted, nil
			default:
			}
			return nil, interrupted, nil
		case <-timer:
			interrupt(StatusTimeout)
		case <-ctxDone:
			interrupt(StatusCancelled)
		case <-grace:
			k.kill(fmt.Sprintf("the cell ignored the interrupt for %s and the Python process was killed", k.o.Grace))
			<-k.done
			return nil, interrupted, nil
		}
	}
}
