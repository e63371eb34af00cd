package wheel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// compileScript compiles the .py files named on stdin to unchecked-hash .pyc files
// (PEP 552) whose co_filename is the in-sandbox path. Files that do not compile (Python 2
// syntax, bad encodings ...) are skipped, as pip does.
//
// Keep it byte for byte: before CPython 3.11, marshal marks an interned string as shared
// only when something else holds it, so the .pyc bytes depend on what the process holds,
// the script's own names included; older interpreters are served by this script, one
// fresh process per wheel, exactly as before the Compiler existed.
const compileScript = `
import importlib.util, json, os, py_compile, sys, warnings
warnings.filterwarnings("ignore")
req = json.loads(sys.stdin.buffer.read().decode("utf-8"))
root, prefix = req["root"], req["prefix"]
out = {"compiled": [], "skipped": []}
for rel in req["files"]:
    src = os.path.join(root, rel)
    cfile = importlib.util.cache_from_source(src)
    try:
        py_compile.compile(src, cfile=cfile, dfile=prefix + "/" + rel, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    except py_compile.PyCompileError:
        out["skipped"].append(rel)
        continue
    out["compiled"].append(os.path.relpath(cfile, root))
sys.stdout.buffer.write(json.dumps(out).encode("ascii"))
`

// serveScript compiles like compileScript, for one request (JSON) per line of stdin,
// answering each with one line: for each file in order, the path of its .pyc relative to
// the root, or nothing when it was skipped, the entries separated by NUL (wheel paths
// have no control characters). Its first line describes the interpreter (Describe):
// "IMPLEMENTATION MAJOR MINOR CACHE_TAG MAGIC_HEX SYS_VERSION_HEX".
//
// A file's .pyc must be the bytes compileScript writes in a fresh process, whatever the
// process compiled before. From CPython 3.11 on, marshal marks every interned string as
// shared and nothing a compile makes outlives it, but for one thing: whether each
// one-character string, a process-wide singleton, is interned. The compiler interns the
// ASCII name-like ones wherever a file uses them, so they do not matter; any other is
// interned by an identifier (a Latin-1 letter), by a codec module a coding cookie
// imports, or by the script itself, so the script never does (it writes bytes, never
// JSON: the json encoder interns "[", "]", "{" and "}"), and after each request it
// checks, with marshal, that no other singleton became interned. If one did, it answers
// "!" and exits: the caller compiles that wheel again in a fresh process.
const serveScript = `
import importlib.util, json, marshal, os, py_compile, sys, warnings
warnings.filterwarnings("ignore")
probe = [chr(c) for c in range(256) if not (c < 128 and (chr(c).isalnum() or c == 95))]
start = [marshal.dumps(c) for c in probe]
out = sys.stdout.buffer
out.write(b"%s %d %d %s %s %s\n" % (sys.implementation.name.encode("ascii"), sys.version_info[0], sys.version_info[1],
    str(sys.implementation.cache_tag).encode("ascii"), importlib.util.MAGIC_NUMBER.hex().encode("ascii"),
    sys.version.encode("utf-8").hex().encode("ascii")))
out.flush()
for line in sys.stdin.buffer:
    req = json.loads(line.decode("utf-8"))
    root, prefix = req["root"], req["prefix"]
    res = []
    for rel in req["files"]:
        src = os.path.join(root, rel)
        cfile = importlib.util.cache_from_source(src)
        try:
            py_compile.compile(src, cfile=cfile, dfile=prefix + "/" + rel, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        except py_compile.PyCompileError:
            res.append(b"")
            continue
        res.append(os.fsencode(os.path.relpath(cfile, root)))
    if [marshal.dumps(c) for c in probe] != start:
        out.write(b"!\n")
        out.flush()
        break
    out.write(b"\0".join(res) + b"\n")
    out.flush()
`

// chunkFiles is how many files one request to a shared process compiles: small enough
// that one wheel's files spread over every process, big enough that the round trips
// (well under a millisecond each) do not count.
const chunkFiles = 8

// compileReq is what a compile script reads, compileRes what it answers.
type compileReq struct {
	Root   string   `json:"root"`
	Prefix string   `json:"prefix"`
	Files  []string `json:"files"`
}

type compileRes struct{ Compiled, Skipped []string }

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
// The processes run like Install's: an empty environment but PYTHONHASHSEED=0, -S -s -B,
// an empty private working directory. They end with ctx, or at Close.
type Compiler struct {
	interp string
	ctx    context.Context
	idle   chan *worker  // started processes waiting for a request
	room   chan struct{} // a token for each process that may still be started
	mu     sync.Mutex
	live   map[*worker]struct{}
	closed bool
	fresh  atomic.Int64 // wheels compiled again in a fresh process
	kind   struct {
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
	c := &Compiler{interp: interpreter, ctx: ctx, idle: make(chan *worker, procs),
		room: make(chan struct{}, procs), live: map[*worker]struct{}{}}
	for range procs {
		w, err := c.start()
		if err != nil {
			c.Close()
			return nil, err
		}
		c.idle <- w
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
	c.mu.Unlock()
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
	if len(started) == 0 {
		return InterpreterInfo{}, fmt.Errorf("compiling .pyc with %s: the compiler is closed", c.interp)
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

// command is the interpreter running script, as Install runs it.
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

// acquire takes an idle process, or starts one where one has gone.
func (c *Compiler) acquire(ctx context.Context) (*worker, error) {
	var w *worker
	select {
	case w = <-c.idle:
	case <-c.room:
		var err error
		if w, err = c.start(); err != nil {
			c.room <- struct{}{}
			return nil, err
		}
	case <-ctx.Done():
		return nil, ctx.Err()
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

// release gives a process that answered back to the pool.
func (c *Compiler) release(w *worker) { c.idle <- w }

// fail ends a process that did not answer and makes room for another one.
func (c *Compiler) fail(w *worker, err error) error {
	c.mu.Lock()
	_, ok := c.live[w]
	delete(c.live, w)
	c.mu.Unlock()
	if ok {
		w.cmd.Process.Kill()
		w.cmd.Wait()
		c.room <- struct{}{}
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
	b, err := json.Marshal(req)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		c.release(w)
		return res, err
	}
	var line []byte
	if _, err = w.stdin.Write(append(b, '\n')); err == nil {
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

// compile compiles srcs (paths relative to site, sorted) and returns the tree paths of
// the .pyc files written and the sources skipped, in the order of srcs.
func (c *Compiler) compile(ctx context.Context, site, prefix string, srcs []string) ([]string, []string, error) {
	first, err := c.acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	if !c.shared(first.hello) {
		c.release(first)
		return compileOnce(ctx, c.interp, site, prefix, srcs)
	}
	chunks := make([][]string, 0, (len(srcs)+chunkFiles-1)/chunkFiles)
	for i := 0; i < len(srcs); i += chunkFiles {
		chunks = append(chunks, srcs[i:min(i+chunkFiles, len(srcs))])
	}
	results := make([]compileRes, len(chunks))
	var tainted atomic.Bool
	g, gctx := errgroup.WithContext(ctx)
	for i, files := range chunks {
		g.Go(func() error {
			w := first
			if i > 0 {
				var err error
				if w, err = c.acquire(gctx); err != nil {
					return err
				}
			}
			var err error
			results[i], err = c.request(gctx, w, compileReq{Root: site, Prefix: prefix, Files: files})
			if errors.Is(err, errTainted) {
				tainted.Store(true) // the other chunks go on: their processes are fine
				return nil
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	if tainted.Load() {
		// Some .pyc may differ from a fresh process's: compile the wheel again in one.
		c.fresh.Add(1)
		return compileOnce(ctx, c.interp, site, prefix, srcs)
	}
	var all compileRes
	for _, r := range results {
		all.Compiled = append(all.Compiled, r.Compiled...)
		all.Skipped = append(all.Skipped, r.Skipped...)
	}
	return checkCompiled(c.interp, all)
}

// compileOnce runs compileScript in a fresh process of interp for the files of one wheel.
func compileOnce(ctx context.Context, interp, site, prefix string, srcs []string) ([]string, []string, error) {
	req, err := json.Marshal(compileReq{Root: site, Prefix: prefix, Files: srcs})
	if err != nil {
		return nil, nil, err
	}
	cwd, err := os.MkdirTemp("", "pylayer-pyc-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(cwd)
	c := &Compiler{interp: interp, ctx: ctx}
	cmd := c.command(compileScript, cwd)
	cmd.Stdin = bytes.NewReader(req)
	var stdout bytes.Buffer
	stderr := &capped{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("compiling .pyc with %s: %w: %s", interp, err, strings.TrimSpace(stderr.String()))
	}
	var res compileRes
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return nil, nil, fmt.Errorf("compiling .pyc with %s: unexpected output: %w", interp, err)
	}
	return checkCompiled(interp, res)
}

// checkCompiled turns the .pyc paths a script reported (relative to site-packages) into
// tree paths, refusing any that is not a .pyc in a __pycache__ of the tree.
func checkCompiled(interp string, res compileRes) ([]string, []string, error) {
	var pycs []string
	for _, c := range res.Compiled {
		c = filepath.ToSlash(c)
		if !filepath.IsLocal(c) || path.Clean(c) != c || path.Base(path.Dir(c)) != "__pycache__" || !strings.HasSuffix(c, ".pyc") {
			return nil, nil, fmt.Errorf("compiling .pyc with %s: unexpected output file %q", interp, c)
		}
		pycs = append(pycs, "site-packages/"+c)
	}
	return pycs, res.Skipped, nil
}

// capped keeps the first max bytes written to it; it is safe for concurrent use.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
