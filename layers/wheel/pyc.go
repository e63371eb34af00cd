package wheel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

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

// serveScript compiles like compileScript, for one request per line of stdin (the root,
// the prefix and each file, UTF-8, separated by NUL: encodeReq), answering each with one
// line: for each file in order, the path of its .pyc relative to the root, or nothing
// when it was skipped, the entries separated by NUL (wheel paths have no control
// characters). Its first line, written before the script imports what compiling needs,
// describes the interpreter (Describe):
// "IMPLEMENTATION MAJOR MINOR CACHE_TAG MAGIC_HEX SYS_VERSION_HEX".
//
// It imports only marshal, os and warnings, and takes the rest from importlib's frozen
// bootstrap, loaded at every start: importlib.util, json and py_compile (and the re,
// enum, collections and contextlib they import) were half of each process's start, 42
// against 22 ms (CPU, CPython 3.11 on the 2-core machine), and every build waits for its
// processes before its first compile. None of them changes which singletons are
// interned (the marshal probe below reads the same after either set of imports).
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
//
// It imports nothing from its working directory (sys.path[0] for -c), and moves to "/"
// before its first line: the private directory it starts in is removed once it has
// said hello, and CPython 3.13.0 fails the first compile of a file with a coding cookie
// in a process whose working directory is gone ("SystemError: error return without
// exception set"), which made such a file's .pyc missing or there by the order the
// processes took the files in. Every path it is given is absolute (encodeReq).
//
// It does what py_compile.compile does for an unchecked-hash .pyc, through the same
// importlib calls but without its per-file checks, loader object and FileExistsError
// raised for every existing __pycache__: a third less time per file. It writes each
// .pyc in place, not to a temporary name renamed over it: the tree is the install's
// alone until it is renamed into place whole (a .pyc already there is unlinked first, as
// it may be a hard link into another tree). Where importlib lacks those calls, it
// calls py_compile.
const serveScript = `
import sys
if sys.path and sys.path[0] == "":  # the working directory: nothing is imported from it
    del sys.path[0]
import posix
posix.chdir("/")
bootstrap = sys.modules.get("_frozen_importlib_external")
if bootstrap is None:
    import importlib.util as bootstrap
out = sys.stdout.buffer
out.write(b"%s %d %d %s %s %s\n" % (sys.implementation.name.encode("ascii"), sys.version_info[0], sys.version_info[1],
    str(sys.implementation.cache_tag).encode("ascii"), bootstrap.MAGIC_NUMBER.hex().encode("ascii"),
    sys.version.encode("utf-8").hex().encode("ascii")))
out.flush()
import marshal, os, warnings
try:
    import _imp
    SourceLoader, _code_to_hash_pyc = bootstrap.SourceLoader, bootstrap._code_to_hash_pyc
    cache_from_source, _raw_magic = bootstrap.cache_from_source, bootstrap._RAW_MAGIC_NUMBER
    def source_hash(source):  # importlib.util.source_hash
        return _imp.source_hash(_raw_magic, source)
except (ImportError, AttributeError):
    import importlib.util, py_compile
    SourceLoader, cache_from_source = None, importlib.util.cache_from_source
warnings.filterwarnings("ignore")
probe = [chr(c) for c in range(256) if not (c < 128 and (chr(c).isalnum() or c == 95))]
start = [marshal.dumps(c) for c in probe]
for line in sys.stdin.buffer:
    fields = [f.decode("utf-8") for f in line[:-1].split(b"\0")]
    root, prefix = fields[0], fields[1]
    res = []
    made = set()
    for rel in fields[2:]:
        src = os.path.join(root, rel)
        cfile = cache_from_source(src)
        # Held in a name while the code is marshalled, as py_compile holds it: marshal
        # marks an object shared by its reference count, co_filename's included.
        dfile = prefix + "/" + rel
        if SourceLoader is None:
            try:
                py_compile.compile(src, cfile=cfile, dfile=dfile, doraise=True,
                                   invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
            except py_compile.PyCompileError:
                res.append(b"")
                continue
            res.append(os.fsencode(os.path.relpath(cfile, root)))
            continue
        with open(src, "rb") as f:
            source = f.read()
        try:
            code = SourceLoader.source_to_code(None, source, dfile)
        except Exception:
            res.append(b"")
            continue
        pycache = os.path.dirname(cfile)
        if pycache not in made:
            os.makedirs(pycache, exist_ok=True)
            made.add(pycache)
        data = memoryview(_code_to_hash_pyc(code, source_hash(source), False))
        del code, source  # nothing of one compile outlives it
        # Written in place, not through a temporary name and a rename (_write_atomic):
        # the tree is the install's own until it is complete, and a crash removes it. A
        # .pyc already there may be a hard link into a tree that is not ours (an
        # interpreter's prefix, copied as links to compile its stdlib): it is replaced,
        # never written through.
        try:
            fd = os.open(cfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            os.unlink(cfile)
            fd = os.open(cfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        res.append(os.fsencode(cfile[len(root) + 1:] if cfile.startswith(root + os.sep) else os.path.relpath(cfile, root)))
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

// encodeReq is req as serveScript reads it: one line, the root, the prefix and the files
// separated by NUL. Neither NUL nor a newline may be in any of them, and all must be
// UTF-8 (the script decodes them strictly).
func encodeReq(req compileReq) ([]byte, error) {
	n := len(req.Root) + len(req.Prefix) + 2
	for _, f := range req.Files {
		n += len(f) + 1
	}
	if !filepath.IsAbs(req.Root) {
		return nil, fmt.Errorf("compiling .pyc: the root %q is not an absolute path", req.Root)
	}
	b := make([]byte, 0, n)
	for i, f := range append([]string{req.Root, req.Prefix}, req.Files...) {
		if strings.ContainsAny(f, "\x00\n") || !utf8.ValidString(f) {
			return nil, fmt.Errorf("compiling .pyc: path %q has a NUL or a newline, or is not UTF-8", f)
		}
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, f...)
	}
	return append(b, '\n'), nil
}

// compile compiles srcs (paths relative to site) and returns the tree paths of the .pyc
// files written and the sources skipped, in the order of srcs.
func (c *Compiler) compile(ctx context.Context, site, prefix string, srcs []string) ([]string, []string, error) {
	j := c.begin(ctx, site, prefix, 0)
	for i := 0; i < len(srcs); i += chunkFiles {
		j.add(srcs[i:min(i+chunkFiles, len(srcs))])
	}
	return j.wait()
}

// A compileJob compiles the sources of one wheel, sent a few at a time as they are
// written, each batch to whichever process is free.
type compileJob struct {
	c            *Compiler
	ctx          context.Context // the caller's
	gctx         context.Context // the batches', canceled by the first that fails
	g            *errgroup.Group
	site, prefix string
	prio         int64         // of its batches, when they wait for a process
	srcs         []string      // every source added, in order
	results      []*compileRes // each batch's answer, in order
	unshared     atomic.Bool   // the interpreter is older than 3.11: one fresh process
	tainted      atomic.Bool   // a batch changed its process: the wheel again, fresh
}

// begin starts a job for the sources under site. Its batches get a free process before
// those of jobs of a lower prio: Install gives the size of its wheel's tree, whose pack
// is the most work left once its .pyc are compiled.
func (c *Compiler) begin(ctx context.Context, site, prefix string, prio int64) *compileJob {
	g, gctx := errgroup.WithContext(ctx)
	return &compileJob{c: c, ctx: ctx, gctx: gctx, g: g, site: site, prefix: prefix, prio: prio}
}

// add sends files, which are written, to be compiled; not safe for concurrent use.
func (j *compileJob) add(files []string) {
	if len(files) == 0 {
		return
	}
	files = slices.Clone(files)
	j.srcs = append(j.srcs, files...)
	res := &compileRes{}
	j.results = append(j.results, res)
	j.g.Go(func() error {
		w, err := j.c.acquire(j.gctx, j.prio)
		if err != nil {
			return err
		}
		if !j.c.shared(w.hello) { // compiled in a fresh process, all at once, by wait
			j.c.release(w)
			j.unshared.Store(true)
			return nil
		}
		*res, err = j.c.request(j.gctx, w, compileReq{Root: j.site, Prefix: j.prefix, Files: files})
		if errors.Is(err, errTainted) {
			// Some .pyc may differ from a fresh process's. The other batches go on:
			// their processes are fine.
			j.tainted.Store(true)
			return nil
		}
		return err
	})
}

// wait waits for every batch and returns what compile returns for all the sources added.
func (j *compileJob) wait() ([]string, []string, error) {
	if err := j.g.Wait(); err != nil {
		return nil, nil, err
	}
	if len(j.srcs) == 0 {
		return nil, nil, nil
	}
	if j.tainted.Load() {
		j.c.fresh.Add(1)
	}
	if j.tainted.Load() || j.unshared.Load() {
		return compileOnce(j.ctx, j.c.interp, j.site, j.prefix, j.srcs)
	}
	var all compileRes
	for _, r := range j.results {
		all.Compiled = append(all.Compiled, r.Compiled...)
		all.Skipped = append(all.Skipped, r.Skipped...)
	}
	return checkCompiled(j.c.interp, all)
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
