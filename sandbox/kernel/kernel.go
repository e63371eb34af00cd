package kernel

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pylayer/pylayer/sandbox"
	"golang.org/x/sys/unix"
)

//go:embed driver.py
var driverSource string

// bootstrap compiles the driver (sys.argv[1]) under the file name its
// tracebacks leave out.
const bootstrap = `import sys; exec(compile(sys.argv[1], "<pylayer-kernel>", "exec"))`

// Interpreter is the interpreter that runs the driver: the Spec's own, or in
// degraded mode the host's /usr/bin/python3, which the sandbox links there.
const Interpreter = sandbox.InterpreterDir + "/bin/python3"

// Defaults of Options, and the cap of a call's outputs.
const (
	DefaultMaxOutput    = 1 << 20
	DefaultGrace        = 3 * time.Second
	DefaultStartTimeout = 30 * time.Second
	// MaxOutputs caps the display data (Result.Outputs) of one call.
	MaxOutputs = 8 << 20
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrBusy: another call of the kernel is running (calls are serialised by
	// the caller; a concurrent one is refused, never queued).
	ErrBusy = errors.New("kernel busy: another call of this session is running; wait for it or cancel it")
	// ErrDead: the kernel's process is gone (it crashed, was killed or closed);
	// start a new kernel.
	ErrDead = errors.New("kernel dead: its Python process is gone; start a new one")
)

// Options configures Start.
type Options struct {
	Bwrap string
	// Spec is the session's sandbox; Start sets its Command (the interpreter
	// running the driver).
	Spec sandbox.Spec
	// User is the host user the sandbox runs as when the caller is root
	// (sandbox.RunOptions.User).
	User string
	// ID names the sandbox in errors (sandbox.StartOptions.ID), default random.
	ID string
	// MaxOutput caps stdout and stderr per stream per call, default
	// DefaultMaxOutput; outputs are capped at MaxOutputs per call.
	MaxOutput int64
	// Grace is how long a cell may run on after an interrupt before the
	// process is killed, default DefaultGrace.
	Grace time.Duration
	// StartTimeout bounds the start, default DefaultStartTimeout.
	StartTimeout time.Duration
}

func (o Options) withDefaults() (Options, error) {
	if o.MaxOutput < 0 || o.Grace < 0 || o.StartTimeout < 0 {
		return o, fmt.Errorf("%w: negative output cap, grace or start timeout", sandbox.ErrInvalidSpec)
	}
	if o.MaxOutput == 0 {
		o.MaxOutput = DefaultMaxOutput
	}
	if o.Grace == 0 {
		o.Grace = DefaultGrace
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	return o, nil
}

// Kernel is a running kernel: one Python process in one sandbox.
type Kernel struct {
	o      Options
	proc   *sandbox.Process
	python string // the interpreter's version, from the driver's ready event

	wmu  sync.Mutex // one request line at a time on the process's stdin
	busy atomic.Bool
	seq  atomic.Uint64

	mu         sync.Mutex
	cur        *call
	pings      map[string]chan struct{}
	killReason string // why this package killed the process, if it did
	reason     string // why the process is gone; read after done is closed
	ready      chan message

	done chan struct{} // closed when the process is gone and reaped
	diag tail          // the end of the process's own stderr (bwrap, Python startup)
}

// Start starts a kernel in the sandbox o.Spec describes and waits for its
// driver to say it is ready. ctx (and o.StartTimeout) bound the start only; the
// kernel lives until Close, a crash or the end of the calling process.
func Start(ctx context.Context, o Options) (*Kernel, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	s := o.Spec
	s.Command = []string{Interpreter, "-c", bootstrap, driverSource}
	p, err := sandbox.Start(ctx, o.Bwrap, s, sandbox.StartOptions{User: o.User, ID: o.ID})
	if err != nil {
		return nil, fmt.Errorf("starting a kernel: %w", err)
	}
	k := &Kernel{
		o: o, proc: p,
		pings: map[string]chan struct{}{},
		ready: make(chan message, 1),
		done:  make(chan struct{}),
		diag:  tail{max: 4096},
	}
	stderrDone := make(chan struct{})
	go func() {
		_, _ = io.Copy(&k.diag, p.Stderr())
		_ = p.Stderr().Close()
		close(stderrDone)
	}()
	go k.read(stderrDone)

	t := time.NewTimer(o.StartTimeout)
	defer t.Stop()
	select {
	case m := <-k.ready:
		k.python = m.Python
		return k, nil
	case <-k.done:
		return nil, fmt.Errorf("starting a kernel in sandbox %s: %s before it was ready%s", p.ID(), k.reason, k.diag.suffix())
	case <-ctx.Done():
		k.kill("the start was cancelled")
		<-k.done
		return nil, fmt.Errorf("starting a kernel in sandbox %s: %w", p.ID(), ctx.Err())
	case <-t.C:
		k.kill("the start timed out")
		<-k.done
		return nil, fmt.Errorf("starting a kernel in sandbox %s: not ready after %s%s (raise the start timeout if the host is busy)",
			p.ID(), o.StartTimeout, k.diag.suffix())
	}
}

// PID is the host pid of the kernel's bwrap process.
func (k *Kernel) PID() int { return k.proc.PID() }

// Python is the version of the kernel's interpreter ("3.12.4").
func (k *Kernel) Python() string { return k.python }

// Done is closed when the kernel's process is gone.
func (k *Kernel) Done() <-chan struct{} { return k.done }

// DeadReason says why the kernel's process is gone, "" while it runs.
func (k *Kernel) DeadReason() string {
	select {
	case <-k.done:
		return k.reason
	default:
		return ""
	}
}

// Close ends the kernel: it closes the driver's stdin, on which the driver
// exits, and kills the sandbox whole if it has not exited a second later.
// Close waits until the process is gone; closing a dead kernel does nothing.
func (k *Kernel) Close() error {
	k.mu.Lock()
	if k.killReason == "" {
		k.killReason = "the kernel was closed"
	}
	k.mu.Unlock()
	_ = k.proc.Stdin().Close()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-k.done:
	case <-t.C:
		if err := k.proc.Kill(); err != nil {
			return fmt.Errorf("closing kernel %s: %w", k.proc.ID(), err)
		}
		<-k.done
	}
	return nil
}

// Ping checks that the driver answers; its control thread does, even while a
// cell runs. A dead kernel gives ErrDead.
func (k *Kernel) Ping(ctx context.Context) error {
	id := "p" + strconv.FormatUint(k.seq.Add(1), 10)
	ch := make(chan struct{})
	k.mu.Lock()
	k.pings[id] = ch
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		delete(k.pings, id)
		k.mu.Unlock()
	}()
	if err := k.send(request{Op: "ping", ID: id}); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-k.done:
		return fmt.Errorf("%w: %s", ErrDead, k.reason)
	case <-ctx.Done():
		return fmt.Errorf("pinging kernel %s: %w", k.proc.ID(), ctx.Err())
	}
}

// request is one line to the driver.
type request struct {
	Op         string  `json:"op"`
	ID         string  `json:"id"`
	Code       string  `json:"code,omitempty"`
	Command    string  `json:"command,omitempty"`
	Timeout    float64 `json:"timeout,omitempty"` // seconds
	MaxOutput  int64   `json:"max_output,omitempty"`
	MaxOutputs int64   `json:"max_outputs,omitempty"`
}

// message is one line from the driver.
type message struct {
	Ev   string `json:"ev"`
	Run  string `json:"run"`
	ID   string `json:"id"`
	Name string `json:"name"`
	Text string `json:"text"`
	MIME string `json:"mime"`
	Data string `json:"data"`

	Status           string   `json:"status"`
	EName            string   `json:"ename"`
	EValue           string   `json:"evalue"`
	Traceback        []string `json:"traceback"`
	StdoutTruncated  bool     `json:"stdout_truncated"`
	StderrTruncated  bool     `json:"stderr_truncated"`
	OutputsTruncated bool     `json:"outputs_truncated"`
	ExitCode         int      `json:"exit_code"`
	Stdout           string   `json:"stdout"`
	Stderr           string   `json:"stderr"`

	Python string `json:"python"`
}

// send writes one request; a process that is gone gives ErrDead.
func (k *Kernel) send(r request) error {
	select {
	case <-k.done:
		return fmt.Errorf("%w: %s", ErrDead, k.reason)
	default:
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding a kernel request: %w", err)
	}
	b = append(b, '\n')
	k.wmu.Lock()
	defer k.wmu.Unlock()
	if _, err := k.proc.Stdin().Write(b); err != nil {
		return fmt.Errorf("%w: writing to the kernel: %w", ErrDead, err)
	}
	return nil
}

// kill kills the process, for reason (the first reason given stays).
func (k *Kernel) kill(reason string) {
	k.mu.Lock()
	if k.killReason == "" {
		k.killReason = reason
	}
	k.mu.Unlock()
	_ = k.proc.Kill()
}

// read dispatches the driver's events until its stdout ends, then waits for
// the process and says why it is gone.
func (k *Kernel) read(stderrDone <-chan struct{}) {
	limit := k.maxLine()
	if err := readLines(k.proc.Stdout(), limit, k.dispatch); errors.Is(err, errLineTooLong) {
		// The cell's code can write to this pipe too: it must not make the host
		// hold an endless line.
		k.kill(fmt.Sprintf("the kernel's process broke the protocol (a line of over %d bytes)", limit))
		_, _ = io.Copy(io.Discard, k.proc.Stdout())
	}
	_ = k.proc.Stdout().Close()
	// The driver's stdout is held by bwrap too: its end means the sandbox is
	// ending. Give it a moment to exit with its own status before killing it.
	t := time.NewTimer(2 * time.Second)
	select {
	case <-k.proc.Done():
	case <-t.C:
		k.kill("the Python process closed the kernel's pipe")
	}
	t.Stop()
	_ = k.proc.Wait()
	<-stderrDone
	k.mu.Lock()
	k.reason = k.killReason
	if k.reason == "" {
		k.reason = exitReason(k.proc.ExitCode())
	}
	k.mu.Unlock()
	close(k.done)
}

// errLineTooLong: a line of the driver's is longer than its cap.
var errLineTooLong = errors.New("protocol line too long")

// readLines calls fn with each line of r, without its newline (the last one
// may lack it), until EOF; a line longer than limit bytes stops it with
// errLineTooLong, and a read error other than EOF is returned. fn's line is
// valid only during the call.
func readLines(r io.Reader, limit int, fn func(line []byte)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(bytes.TrimSuffix(line, []byte("\n"))) > limit {
			return errLineTooLong
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if len(line) > 0 {
			fn(bytes.TrimSuffix(line, []byte("\n")))
		}
		line = line[:0]
		if cap(line) > 1<<20 {
			line = nil // do not keep a big display's buffer
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF), errors.Is(err, os.ErrClosed):
			return nil
		default:
			return err
		}
	}
}

// maxLine bounds one line from the driver: the biggest event it sends is a
// display of MaxOutputs bytes or a shell result of two streams of MaxOutput,
// each byte escaped in JSON as at most 6.
func (k *Kernel) maxLine() int {
	return 6*(MaxOutputs+2*int(k.o.MaxOutput)) + 64<<10
}

// exitReason says how the Python process ended, from bwrap's exit status.
func exitReason(code int) string {
	if code > 128 && code <= 128+64 {
		return fmt.Sprintf("the Python process exited with signal %s", unix.SignalName(syscall.Signal(code-128)))
	}
	return fmt.Sprintf("the Python process exited with status %d", code)
}

func (k *Kernel) dispatch(line []byte) {
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		return // not the driver's: nothing else writes this pipe
	}
	switch m.Ev {
	case "ready":
		select {
		case k.ready <- m:
		default:
		}
	case "pong":
		k.mu.Lock()
		ch := k.pings[m.ID]
		delete(k.pings, m.ID)
		k.mu.Unlock()
		if ch != nil {
			close(ch)
		}
	case "stream", "display", "result", "shell_result":
		k.mu.Lock()
		c := k.cur
		k.mu.Unlock()
		if c != nil && c.id == m.Run {
			c.handle(m)
		}
	}
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

// suffix is ": " and the tail's text, or "" when it is empty.
func (t *tail) suffix() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(bytes.ToValidUTF8(t.buf, []byte("?"))))
	if s == "" {
		return ""
	}
	return ": " + s
}
