# The pylayer kernel driver: a persistent Python process in a session's sandbox.
#
# Package sandbox/kernel runs it as `python3 -c BOOT SOURCE`, BOOT compiling SOURCE
# (sys.argv[1]) under the name DRIVER_FILE, and speaks newline-delimited
# JSON with it over the process's original stdin and stdout, which the driver keeps as
# private descriptors. The cell's fd 0 is /dev/null, and fds 1 and 2 are pipes read by
# two threads that forward what they read as "stream" events of the current run, so
# the output of subprocesses and C code is captured too.
#
# Requests (one JSON object a line, field "op"):
#   exec {id, code, max_output, max_outputs}  run a cell in the main thread
#   shell {id, command, timeout, max_output}  run /bin/sh -c in the main thread
#   interrupt {id}                            SIGINT to the main thread if run id is running
#   ping {id}                                 answered at once by the control thread
# Events (field "ev"): ready, stream {run, name, text}, display {run, mime, data},
# result {run, status, ename, evalue, traceback, *_truncated}, shell_result, pong {id},
# and error {text} for a request the driver cannot read.
#
# Nothing here may import matplotlib, or anything slow, before a cell does.

import builtins
import codecs
import json
import os
import signal
import sys
import threading

_SEND_LOCK = threading.Lock()
_PROTO_OUT = -1
_MAIN = threading.main_thread().ident
_STATE_LOCK = threading.Lock()
_CURRENT = None  # the _Run being executed, or None
_CELLS = 0
_QUEUE = []
_QUEUE_CV = threading.Condition()

INPUT_MSG = ("input() is not available in pylayer exec: the cell has no stdin; "
             "pass data in the code or in a file")
STDIN_MSG = ("sys.stdin is not available in pylayer exec: the cell has no stdin; "
             "pass data in the code or in a file")
INLINE_BACKEND = "module://pylayer_inline"


def _send(obj):
    line = (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")
    with _critical(), _SEND_LOCK:
        view = memoryview(line)
        while view:
            n = os.write(_PROTO_OUT, view)
            view = view[n:]


class _Critical:
    """In the main thread, holds back an interrupt (KeyboardInterrupt) until the end
    of a section that must not be cut short: a half-written event would break the
    protocol, an abandoned sync the next one."""

    depth = 0
    pending = False

    def __enter__(self):
        if threading.get_ident() == _MAIN:
            _Critical.depth += 1
        return self

    def __exit__(self, *exc):
        if threading.get_ident() != _MAIN:
            return False
        _Critical.depth -= 1
        if _Critical.depth == 0 and _Critical.pending:
            _Critical.pending = False
            run = _CURRENT
            if run is not None and run.interruptible and exc[0] is None:
                raise KeyboardInterrupt
        return False


def _critical():
    return _Critical()


class _Run:
    """One exec or shell request while it runs: its id and per-call caps."""

    def __init__(self, rid, max_output, max_outputs):
        self.id = rid
        self.max_output = max_output
        self.max_outputs = max_outputs
        self.sent = {"stdout": 0, "stderr": 0}
        self.truncated = {"stdout": False, "stderr": False}
        self.outputs = 0
        self.outputs_truncated = False
        self.interruptible = False  # SIGINT raises KeyboardInterrupt only while True


# ---- the output pipes -------------------------------------------------------------

class _Stream:
    """The reader of one of the pipes behind fds 1 and 2.

    sync() makes sure that everything written to the pipe before it was called has
    been forwarded: it writes a marker that only this process knows and waits for the
    reader to see it.
    """

    def __init__(self, name, fd, read_fd):
        self.name = name
        self.fd = fd
        self.read_fd = read_fd
        self.marker = b"\x00\x01pylayer-sync-" + os.urandom(8).hex().encode() + b"\x00"
        self.cv = threading.Condition()
        self.asked = 0  # markers written
        self.seen = 0  # markers read
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        t = threading.Thread(target=self._loop, name="pylayer-" + name, daemon=True)
        t.start()

    def sync(self, timeout=2.0):
        with _critical():
            try:
                os.write(self.fd, self.marker)
            except OSError:
                return  # the cell closed or replaced its fd: nothing more to wait for
            with self.cv:
                self.asked += 1
                self.cv.wait_for(lambda: self.seen >= self.asked, timeout)

    def _loop(self):
        pending = b""
        m = self.marker
        while True:
            try:
                b = os.read(self.read_fd, 65536)
            except InterruptedError:
                continue
            except OSError:
                return
            if not b:
                return
            pending += b
            while True:
                i = pending.find(m)
                if i < 0:
                    break
                self._forward(pending[:i], final=True)
                pending = pending[i + len(m):]
                with self.cv:
                    self.seen += 1
                    self.cv.notify_all()
            # Hold back a tail that could be the start of a marker.
            hold = b""
            for j in range(max(0, len(pending) - len(m) + 1), len(pending)):
                if m.startswith(pending[j:]):
                    hold = pending[j:]
                    pending = pending[:j]
                    break
            self._forward(pending, final=False)
            pending = hold

    def _forward(self, data, final):
        with _STATE_LOCK:
            run = _CURRENT
        if run is None:
            self.decoder.reset()
            return  # output of a background thread between runs: nobody to tell
        if run.truncated[self.name]:
            return
        room = run.max_output - run.sent[self.name]
        cut = len(data) > room
        if cut:
            data = data[:max(room, 0)]
        run.sent[self.name] += len(data)
        text = self.decoder.decode(data, final=final or cut)
        if cut:
            run.truncated[self.name] = True
            text += "\n[pylayer: output truncated after %d bytes]\n" % run.max_output
        if text:
            _send({"ev": "stream", "run": run.id, "name": self.name, "text": text})


_STREAMS = []


def _sync_streams():
    for f in (sys.__stdout__, sys.__stderr__):
        try:
            f.flush()
        except Exception:
            pass
    for s in _STREAMS:
        s.sync()


# ---- no stdin ---------------------------------------------------------------------

def _no_input(prompt=""):
    raise RuntimeError(INPUT_MSG)


class _NoStdin:
    encoding = "utf-8"
    errors = "strict"
    closed = False
    name = "<stdin>"

    def _fail(self, *a, **k):
        raise RuntimeError(STDIN_MSG)

    read = readline = readlines = read1 = readinto = _fail
    __next__ = _fail

    @property
    def buffer(self):
        raise RuntimeError(STDIN_MSG)

    def __iter__(self):
        return self

    def fileno(self):
        return 0

    def isatty(self):
        return False

    def readable(self):
        return True

    def close(self):
        pass


# ---- rich output ------------------------------------------------------------------

_REPR_METHODS = [  # richest first: display() sends the first a object has
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("image/svg+xml", "_repr_svg_"),
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("application/json", "_repr_json_"),
    ("text/latex", "_repr_latex_"),
]


def _encode(mime, data):
    if isinstance(data, tuple):  # (data, metadata)
        data = data[0]
    if isinstance(data, (bytes, bytearray)):
        import base64
        return base64.b64encode(bytes(data)).decode("ascii")
    if mime == "application/json" and not isinstance(data, str):
        return json.dumps(data, default=repr)
    return str(data)


def _richest(obj):
    """The richest (mime, data) of obj, as Jupyter front ends choose them."""
    if isinstance(obj, type):
        return "text/plain", repr(obj)
    mf = sys.modules.get("matplotlib.figure")
    if mf is not None and isinstance(obj, getattr(mf, "Figure", ())):
        png = _figure_png(obj)
        if png is not None:
            return "image/png", png
    bundle = getattr(obj, "_repr_mimebundle_", None)
    if callable(bundle):
        try:
            b = bundle(include=None, exclude=None)
        except Exception:
            b = None
        if isinstance(b, tuple):
            b = b[0]
        if isinstance(b, dict) and b:
            for mime, _ in _REPR_METHODS:
                if b.get(mime) is not None:
                    return mime, _encode(mime, b[mime])
            if b.get("text/plain") is not None:
                return "text/plain", str(b["text/plain"])
    for mime, name in _REPR_METHODS:
        m = getattr(obj, name, None)
        if not callable(m):
            continue
        try:
            data = m()
        except Exception:
            continue
        if data is not None:
            return mime, _encode(mime, data)
    if isinstance(obj, (dict, list)):
        try:
            return "application/json", json.dumps(obj)
        except (TypeError, ValueError):
            pass
    return "text/plain", repr(obj)


def _output(mime, data):
    run = _CURRENT
    if run is None:
        return
    if run.outputs + len(data) > run.max_outputs:
        run.outputs_truncated = True
        return
    run.outputs += len(data)
    with _critical():
        _sync_streams()  # what the cell printed before comes first
        _send({"ev": "display", "run": run.id, "mime": mime, "data": data})


def display(*objs, raw=False, **kwargs):
    """Show each object as its richest MIME type (text/html, image/png ...)."""
    for obj in objs:
        if raw and isinstance(obj, dict):
            for mime, _ in _REPR_METHODS + [("text/plain", "")]:
                if mime in obj:
                    _output(mime, _encode(mime, obj[mime]))
                    break
            continue
        _output(*_richest(obj))


# ---- matplotlib ---------------------------------------------------------------------
#
# The inline backend, as Jupyter's: plt.show() and the end of a cell render every open
# pyplot figure as image/png and close it; a figure the cell saved with savefig (then
# maybe closed) is shown too. The module exists before matplotlib is imported; its
# canvas is made from Agg's on first use, when matplotlib is there.

_SAVED = []  # figures the current cell saved with savefig
_RENDERING = [False]


def _inline_getattr(name):
    mod = sys.modules["pylayer_inline"]
    if name == "FigureCanvas":
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        class FigureCanvas(FigureCanvasAgg):
            def print_figure(self, *args, **kwargs):
                r = super().print_figure(*args, **kwargs)
                if not _RENDERING[0] and all(f is not self.figure for f in _SAVED):
                    _SAVED.append(self.figure)
                return r

        mod.FigureCanvas = FigureCanvas
        return FigureCanvas
    if name == "FigureManager":
        from matplotlib.backend_bases import FigureManagerBase
        mod.FigureManager = FigureManagerBase
        return FigureManagerBase
    raise AttributeError(name)


def _show_figures(*args, **kwargs):
    """show() of the inline backend: render and close every open pyplot figure."""
    plt = sys.modules.get("matplotlib.pyplot")
    figs = list(_SAVED)
    del _SAVED[:]
    if plt is not None:
        from matplotlib._pylab_helpers import Gcf
        for m in Gcf.get_all_fig_managers():
            if all(f is not m.canvas.figure for f in figs):
                figs.append(m.canvas.figure)
    for fig in figs:
        png = _figure_png(fig)
        if png is not None:
            _output("image/png", png)
    if plt is not None and figs:
        plt.close("all")


def _figure_png(fig):
    """fig as PNG, base64; None (and a line on stderr) if it cannot be drawn."""
    import base64
    import io
    buf = io.BytesIO()
    _RENDERING[0] = True
    try:
        fig.savefig(buf, format="png", bbox_inches="tight")
    except Exception as e:  # a broken figure must not lose the cell's result
        print("pylayer: rendering a figure failed: %r" % (e,), file=sys.stderr)
        return None
    finally:
        _RENDERING[0] = False
    return base64.b64encode(buf.getvalue()).decode("ascii")


class _InlineHook:
    """A sys.meta_path entry that finds nothing: as matplotlib.pyplot is first
    imported, it sets matplotlib's backend to the inline one, unless the cell chose
    another. (Not MPLBACKEND in os.environ: a Python subprocess of the cell would
    inherit it and fail to import a backend that exists in this process only.)"""

    done = False

    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib.pyplot" or self.done:
            return None
        self.done = True
        mpl = sys.modules.get("matplotlib")
        if mpl is None:
            return None
        try:
            cur = dict.__getitem__(mpl.rcParams, "backend")
        except Exception:
            return None
        env = os.environ.get("MPLBACKEND", "agg").lower()
        if not isinstance(cur, str) or cur.lower() == env:
            mpl.rcParams["backend"] = INLINE_BACKEND
        return None


def _install_inline_backend():
    import types
    mod = types.ModuleType("pylayer_inline", "pylayer's inline matplotlib backend")
    mod.__getattr__ = _inline_getattr
    mod.show = _show_figures
    sys.modules["pylayer_inline"] = mod
    sys.meta_path.insert(0, _InlineHook())


def _end_of_cell_figures():
    if _SAVED or "matplotlib.pyplot" in sys.modules:
        mpl = sys.modules.get("matplotlib")
        try:
            ours = mpl is not None and mpl.get_backend() == INLINE_BACKEND
        except Exception:
            ours = False
        if ours:
            _show_figures()
    del _SAVED[:]


# ---- running a cell -----------------------------------------------------------------

def _sigint(signum, frame):
    run = _CURRENT  # no lock: the handler runs in the main thread, which may hold it
    if run is None or not run.interruptible:
        return  # an interrupt that came after its run ended
    if _Critical.depth > 0:
        _Critical.pending = True
        return
    raise KeyboardInterrupt


DRIVER_FILE = "<pylayer-kernel>"  # the name Go compiles this source under


def _error_fields(e, filename):
    import traceback
    tb = e.__traceback__
    # The traceback starts in the cell, and shows none of the driver's frames
    # (input(), the SIGINT handler ...).
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    te = traceback.TracebackException(type(e), e, tb)
    seen, todo = set(), [te]
    while todo:
        t = todo.pop()
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        t.stack = traceback.StackSummary.from_list(
            [f for f in t.stack if f.filename != DRIVER_FILE])
        todo += [t.__cause__, t.__context__] + list(getattr(t, "exceptions", None) or [])
    lines = "".join(te.format()).splitlines()
    try:
        evalue = str(e)
    except Exception:
        evalue = "<unprintable %s>" % type(e).__name__
    return {"ename": type(e).__name__, "evalue": evalue, "traceback": lines}


def _run_cell(run, code, g):
    global _CELLS
    import ast
    import linecache
    _CELLS += 1
    filename = "<cell-%d>" % _CELLS
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    res = {"ev": "result", "run": run.id, "status": "ok"}
    flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
    try:
        run.interruptible = True
        tree = ast.parse(code, filename, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        value = _eval(compile(tree, filename, "exec", flags), g)
        if last is not None:
            value = _eval(compile(last, filename, "eval", flags), g)
            if value is not None:
                g["_"] = value
                _output("text/plain", repr(value))
    except BaseException as e:  # SystemExit and KeyboardInterrupt too: the kernel stays
        run.interruptible = False
        res["status"] = "error"
        res.update(_error_fields(e, filename))
    finally:
        run.interruptible = False
    try:
        _end_of_cell_figures()
    except BaseException as e:
        print("pylayer: showing the cell's figures failed: %r" % (e,), file=sys.stderr)
    return res


def _eval(code, g):
    r = eval(code, g)
    if code.co_flags & 0x80:  # CO_COROUTINE: the cell used top-level await
        import asyncio
        r = asyncio.run(r)
    return r


def _shell(run, req):
    import subprocess
    import time
    timeout = req.get("timeout") or None
    res = {"ev": "shell_result", "run": run.id, "status": "ok", "exit_code": -1}
    try:
        p = subprocess.Popen(["/bin/sh", "-c", req["command"]], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    except OSError as e:
        res.update(status="error", stderr="pylayer: starting /bin/sh: %s\n" % e)
        return res
    caps = {}

    def drain(name, f):
        kept, n = [], 0
        while True:
            b = f.read1(65536) if hasattr(f, "read1") else f.read(65536)
            if not b:
                break
            if n < run.max_output:
                kept.append(b[:run.max_output - n])
            n += len(b)
        text = b"".join(kept).decode("utf-8", "replace")
        if n > run.max_output:
            text += "\n[pylayer: output truncated after %d bytes]\n" % run.max_output
        caps[name] = (text, n > run.max_output)

    readers = [threading.Thread(target=drain, args=(n, f), daemon=True)
               for n, f in (("stdout", p.stdout), ("stderr", p.stderr))]
    for t in readers:
        t.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        run.interruptible = True
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        res["status"] = "timeout"
    except KeyboardInterrupt:
        res["status"] = "cancelled"
    finally:
        run.interruptible = False
    if p.returncode is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        p.wait()
    # A process that left the group may still hold the pipes: do not wait for it long.
    for t in readers:
        t.join(timeout=1.0 if deadline is None else max(1.0, deadline - time.monotonic()))
    res["exit_code"] = p.returncode if p.returncode >= 0 else 128 - p.returncode
    for name in ("stdout", "stderr"):
        text, cut = caps.get(name, ("", False))
        res[name] = text
        res[name + "_truncated"] = cut
    return res


def _serve(g):
    global _CURRENT
    while True:
        try:
            with _QUEUE_CV:
                while not _QUEUE:
                    _QUEUE_CV.wait()
                req = _QUEUE.pop(0)
        except KeyboardInterrupt:
            continue  # an interrupt that came after its run ended
        op = req.get("op")
        run = _Run(req.get("id"), int(req.get("max_output") or 1 << 20),
                   int(req.get("max_outputs") or 8 << 20))
        with _STATE_LOCK:
            _CURRENT = run
        res = None
        try:
            if op == "exec":
                res = _run_cell(run, req.get("code", ""), g)
                _sync_streams()
                res["stdout_truncated"] = run.truncated["stdout"]
                res["stderr_truncated"] = run.truncated["stderr"]
                res["outputs_truncated"] = run.outputs_truncated
            else:
                res = _shell(run, req)
        except KeyboardInterrupt:
            res = res or {"ev": "result" if op == "exec" else "shell_result", "run": run.id,
                          "status": "error", "ename": "KeyboardInterrupt", "evalue": "",
                          "traceback": [], "exit_code": -1}
        finally:
            with _STATE_LOCK:
                _CURRENT = None
        _send(res)


def _control(proto_in):
    while True:
        line = proto_in.readline()
        if not line:
            os._exit(0)  # the Go side closed the pipe (Close) or is gone
        try:
            req = json.loads(line)
            op = req["op"]
        except (ValueError, KeyError, TypeError) as e:
            _send({"ev": "error", "text": "unreadable request: %s" % e})
            continue
        if op == "ping":
            _send({"ev": "pong", "id": req.get("id")})
        elif op == "interrupt":
            with _STATE_LOCK:
                run = _CURRENT
            if run is not None and run.id == req.get("id"):
                signal.pthread_kill(_MAIN, signal.SIGINT)
        elif op in ("exec", "shell"):
            with _QUEUE_CV:
                _QUEUE.append(req)
                _QUEUE_CV.notify()
        else:
            _send({"ev": "error", "text": "unknown op %r" % (op,)})


def _start():
    global _PROTO_OUT
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    _PROTO_OUT = os.dup(1)  # os.dup's copies are not inherited by subprocesses
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    # The driver's threads need little stack; under the session's address-space
    # limit, each default one would reserve 8 MiB.
    threading.stack_size(256 << 10)
    for name, fd in (("stdout", 1), ("stderr", 2)):
        r, w = os.pipe()
        os.dup2(w, fd)  # inheritable: subprocesses write into the same pipe
        os.close(w)
        _STREAMS.append(_Stream(name, fd, r))
    import io
    out = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                           errors="backslashreplace", line_buffering=True)
    err = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                           errors="backslashreplace", line_buffering=True)
    sys.stdout = sys.__stdout__ = out
    sys.stderr = sys.__stderr__ = err
    sys.stdin = sys.__stdin__ = _NoStdin()
    builtins.input = _no_input
    builtins.display = display
    _install_inline_backend()
    signal.signal(signal.SIGINT, _sigint)

    import types
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    sys.argv = [""]
    threading.Thread(target=_control, args=(proto_in,), name="pylayer-control", daemon=True).start()
    threading.stack_size(0)
    _send({"ev": "ready", "pid": os.getpid(), "python": sys.version.split()[0]})
    _serve(main.__dict__)


_start()
