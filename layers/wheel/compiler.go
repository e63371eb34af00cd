package wheel

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A Compiler compiles the .py files of installs to .pyc with one interpreter, in a few
// processes that it starts once and shares between all the Installs given it
// (InstallOptions.Compiler), instead of one interpreter started per wheel: a wheel's
// files are spread over the processes in requests of a few files each.
//
// Every .pyc is the bytes one fresh process per wheel, compiling its files in order,
// writes (what Install does without a Compiler), whichever process compiles it and
// whatever that process compiled before: from CPython 3.11 on, the processes check that
// (serveScript), and a wheel that could tell the difference is compiled again in a fresh
// process. Older interpreters and other implementations give no such guarantee, so for
// them every wheel gets a fresh process.
//
// The processes run with an empty environment but PYTHONHASHSEED=0, -S -s -B, in an
// empty private working directory (see command). They end with ctx, or at Close.
type Compiler struct {
	interp  string
	ctx     context.Context
	mu      sync.Mutex
	idle    []*worker // started processes waiting for a request
	room    int       // processes that may still be started (where some have gone)
	waiting []*waiter // acquires waiting for a process
	seq     uint64
	live    map[*worker]struct{}
	closed  bool
	fresh   atomic.Int64 // wheels compiled again in a fresh process
	kind    struct {
		once   sync.Once
		info   InterpreterInfo
		err    error
		shared bool // the interpreter compiles the same bytes in any process
	}
}

// InterpreterInfo is what a Compiler's interpreter says it is.
type InterpreterInfo struct {
	Implementation string // sys.implementation.name: "cpython"
	Major, Minor   int    // sys.version_info
	CacheTag       string // sys.implementation.cache_tag: "cpython-311"
	Magic          string // importlib.util.MAGIC_NUMBER in hex: "a70d0d0a"
	SysVersion     string // sys.version
}

// A waiter is an acquire waiting for a process: the one of highest priority, then the
// first to come, gets the next that is free.
type waiter struct {
	prio int64
	seq  uint64
	got  chan acquired // one, buffered
}

type acquired struct {
	w   *worker
	err error
}

type worker struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	stdout   *bufio.Reader
	stderr   *capped
	ready    chan struct{} // closed once hello (or helloErr) is read
	hello    []byte        // the first line
	helloErr error
}

// NewCompiler starts procs (at least 1) processes of interpreter, without waiting for
// them: they start up while the caller fetches and unpacks wheels. Close it when the
// Installs that use it have returned; processes not closed end when their parent does.
func NewCompiler(ctx context.Context, interpreter string, procs int) (*Compiler, error) {
	if interpreter == "" {
		return nil, errors.New("compiling .pyc: no interpreter")
	}
	procs = max(procs, 1)
	c := &Compiler{interp: interpreter, ctx: ctx, live: map[*worker]struct{}{}}
	for range procs {
		w, err := c.start()
		if err != nil {
			c.Close()
			return nil, err
		}
		c.idle = append(c.idle, w)
	}
	return c, nil
}

// Interpreter is the interpreter the Compiler runs.
func (c *Compiler) Interpreter() string { return c.interp }

// Close ends the processes and waits for them.
func (c *Compiler) Close() error {
	c.mu.Lock()
	c.closed = true
	live := c.live
	c.live = map[*worker]struct{}{}
	waiting := c.waiting
	c.waiting = nil
	c.mu.Unlock()
	for _, wt := range waiting {
		wt.got <- acquired{err: errors.New("compiling .pyc: the compiler is closed")}
	}
	for w := range live {
		w.stdin.Close() // the script ends at the end of its input
		w.cmd.Wait()
	}
	return nil
}

// Describe is what the interpreter says it is. It waits until every process started has
// said it.
func (c *Compiler) Describe(ctx context.Context) (InterpreterInfo, error) {
	c.mu.Lock()
	var started []*worker
	for w := range c.live {
		started = append(started, w)
	}
	c.mu.Unlock()
	if len(started) == 0 { // all ended: start one
		w, err := c.acquire(ctx, 0)
		if err != nil {
			return InterpreterInfo{}, err
		}
		c.release(w)
		started = append(started, w)
	}
	for _, w := range started {
		select {
		case <-w.ready:
		case <-ctx.Done():
			return InterpreterInfo{}, ctx.Err()
		}
		if w.helloErr != nil {
			return InterpreterInfo{}, c.fail(w, fmt.Errorf("starting: %w", w.helloErr))
		}
	}
	c.describe(started[0].hello)
	return c.kind.info, c.kind.err
}

func (c *Compiler) start() (*worker, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("compiling .pyc: the compiler is closed")
	}
	// The working directory is removed once the interpreter runs (its first line): it
	// stays empty, and a Compiler that is never closed leaves nothing behind. Not before:
	// a wrapper script in front of the interpreter may need it to start.
	cwd, err := os.MkdirTemp("", "pylayer-pyc-")
	if err != nil {
		return nil, fmt.Errorf("compiling .pyc: %w", err)
	}
	started := false
	defer func() {
		if !started {
			os.Remove(cwd)
		}
	}()
	cmd := c.command(serveScript, cwd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w := &worker{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout), stderr: &capped{max: 64 << 10}, ready: make(chan struct{})}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("compiling .pyc with %s: %w", c.interp, err)
	}
	started = true
	go func() {
		w.hello, w.helloErr = w.stdout.ReadBytes('\n')
		os.Remove(cwd)
		close(w.ready)
	}()
	c.live[w] = struct{}{}
	return w, nil
}

// command is the interpreter running script in directory cwd.
//
// The interpreter runs with an empty environment except PYTHONHASHSEED=0, which makes
// the order of set constants, and so the .pyc bytes, reproducible. That rules out -I and
// -E (both ignore PYTHONHASHSEED); -S -s keep site-packages and user site out of
// sys.path instead, and the working directory (sys.path[0] for -c) is an empty private
// directory, so no file of a wheel can shadow a module the script imports.
func (c *Compiler) command(script, cwd string) *exec.Cmd {
	cmd := exec.CommandContext(c.ctx, c.interp, "-S", "-s", "-B", "-X", "utf8", "-c", script)
	cmd.Env = []string{"PYTHONHASHSEED=0"}
	cmd.Dir = cwd
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// acquire takes an idle process, or starts one where one has gone, or waits for one:
// among waiting acquires, the one of highest prio gets the next process that is free.
func (c *Compiler) acquire(ctx context.Context, prio int64) (*worker, error) {
	c.mu.Lock()
	var w *worker
	switch {
	case len(c.idle) > 0:
		w = c.idle[len(c.idle)-1]
		c.idle = c.idle[:len(c.idle)-1]
		c.mu.Unlock()
	case c.room > 0:
		c.room--
		c.mu.Unlock()
		var err error
		if w, err = c.start(); err != nil {
			c.mu.Lock()
			c.room++
			c.mu.Unlock()
			return nil, err
		}
	default:
		c.seq++
		wt := &waiter{prio: prio, seq: c.seq, got: make(chan acquired, 1)}
		c.waiting = append(c.waiting, wt)
		c.mu.Unlock()
		var a acquired
		select {
		case a = <-wt.got:
		case <-ctx.Done():
			c.mu.Lock()
			i := slices.Index(c.waiting, wt)
			if i >= 0 {
				c.waiting = slices.Delete(c.waiting, i, i+1)
			}
			c.mu.Unlock()
			if i >= 0 {
				return nil, ctx.Err()
			}
			if a = <-wt.got; a.w != nil { // handed one meanwhile: pass it on
				c.release(a.w)
			}
			return nil, ctx.Err()
		}
		if a.err != nil {
			return nil, a.err
		}
		w = a.w
	}
	select {
	case <-w.ready:
	case <-ctx.Done():
		return nil, c.fail(w, ctx.Err())
	}
	if w.helloErr != nil {
		return nil, c.fail(w, fmt.Errorf("starting: %w", w.helloErr))
	}
	return w, nil
}

// readLine reads the next line the process writes; when ctx ends first, the process is
// killed and the error is ctx's.
func (w *worker) readLine(ctx context.Context) ([]byte, error) {
	stop := context.AfterFunc(ctx, func() { w.cmd.Process.Kill() })
	line, err := w.stdout.ReadBytes('\n')
	if !stop() {
		return nil, ctx.Err()
	}
	return line, err
}

// shared reports whether the interpreter that said hello compiles the same bytes in any
// process (CPython 3.11 or later).
func (c *Compiler) shared(hello []byte) bool {
	c.describe(hello)
	return c.kind.shared
}

// describe parses the first hello, once.
func (c *Compiler) describe(hello []byte) {
	c.kind.once.Do(func() {
		var i InterpreterInfo
		var version string
		if _, err := fmt.Sscanf(string(hello), "%s %d %d %s %s %s\n", &i.Implementation, &i.Major, &i.Minor, &i.CacheTag, &i.Magic, &version); err != nil {
			c.kind.err = fmt.Errorf("compiling .pyc with %s: unexpected first line %q", c.interp, hello)
			return
		}
		v, err := hex.DecodeString(version)
		if err != nil {
			c.kind.err = fmt.Errorf("compiling .pyc with %s: unexpected first line %q", c.interp, hello)
			return
		}
		i.SysVersion = string(v)
		c.kind.info = i
		c.kind.shared = i.Implementation == "cpython" && (i.Major > 3 || i.Major == 3 && i.Minor >= 11)
	})
}

// release gives a process that answered back: to the first waiting acquire of highest
// priority, else to the idle ones.
func (c *Compiler) release(w *worker) {
	c.mu.Lock()
	wt := c.nextWaiter()
	if wt == nil {
		c.idle = append(c.idle, w)
	}
	c.mu.Unlock()
	if wt != nil {
		wt.got <- acquired{w: w}
	}
}

// nextWaiter removes and returns the waiting acquire to serve next, if any; c.mu held.
func (c *Compiler) nextWaiter() *waiter {
	if len(c.waiting) == 0 {
		return nil
	}
	best := 0
	for i, wt := range c.waiting {
		if b := c.waiting[best]; wt.prio > b.prio || wt.prio == b.prio && wt.seq < b.seq {
			best = i
		}
	}
	wt := c.waiting[best]
	c.waiting = slices.Delete(c.waiting, best, best+1)
	return wt
}

// fail ends a process that did not answer and makes room for another one.
func (c *Compiler) fail(w *worker, err error) error {
	c.mu.Lock()
	_, ok := c.live[w]
	delete(c.live, w)
	c.mu.Unlock()
	if ok {
		w.cmd.Process.Kill()
		w.cmd.Wait()
		c.mu.Lock()
		wt := c.nextWaiter()
		if wt == nil {
			c.room++
		}
		c.mu.Unlock()
		if wt != nil { // start its replacement for a waiting acquire
			nw, err := c.start()
			if err != nil {
				c.mu.Lock()
				c.room++
				c.mu.Unlock()
			}
			wt.got <- acquired{w: nw, err: err}
		}
	}
	if errors.Is(err, io.EOF) && w.cmd.ProcessState != nil {
		err = fmt.Errorf("%w: the interpreter ended (%s)", err, w.cmd.ProcessState)
	}
	if msg := strings.TrimSpace(w.stderr.String()); msg != "" {
		err = fmt.Errorf("%w: %s", err, msg)
	}
	return fmt.Errorf("compiling .pyc with %s: %w", c.interp, err)
}

// request has process w compile one request and returns its answer. When ctx ends first,
// w is killed; on any error w is gone, else it is back in the pool.
func (c *Compiler) request(ctx context.Context, w *worker, req compileReq) (compileRes, error) {
	var res compileRes
	b, err := encodeReq(req)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		c.release(w)
		return res, err
	}
	var line []byte
	if _, err = w.stdin.Write(b); err == nil {
		line, err = w.readLine(ctx)
	}
	if err == nil && string(line) == "!\n" {
		c.fail(w, errTainted) // it exits
		return res, errTainted
	}
	if err == nil {
		res, err = parseAnswer(line, req.Files)
	}
	if err != nil {
		return res, c.fail(w, err)
	}
	c.release(w)
	return res, nil
}

// errTainted: the process's state changed in a way that can change the bytes of .pyc it
// compiles (see serveScript).
var errTainted = errors.New("the process can no longer compile like a fresh one")

// parseAnswer reads serveScript's answer to a request for files.
func parseAnswer(line []byte, files []string) (compileRes, error) {
	var res compileRes
	entries := strings.Split(strings.TrimSuffix(string(line), "\n"), "\x00")
	if len(entries) != len(files) {
		return res, fmt.Errorf("%d answers for %d files", len(entries), len(files))
	}
	for i, e := range entries {
		if e == "" {
			res.Skipped = append(res.Skipped, files[i])
		} else {
			res.Compiled = append(res.Compiled, e)
		}
	}
	return res, nil
}
