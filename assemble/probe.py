# The import probe: run by pylayer ensure inside the sandbox, with one argument, a JSON
# object {"site": "/opt/pylayer/", "submodules": {"PIL": ["PIL.Image"], ...}}. It
# imports what users import from each distribution installed under "site": every
# top-level name (top_level.txt, else RECORD's top-level entries), then the known
# submodules of each that imported (one this version lacks is not a failure). For each import it keeps what was written on
# fd 1 and fd 2 (a banner, warnings, and C libraries' complaints such as fontconfig's),
# and for a failure the exception's type, message and the last lines of its traceback.
# It writes one JSON object on its original stdout and nothing else: before the first
# import that descriptor is kept as a private (non-inherited) copy and fd 1 goes to
# /dev/null, so what a module prints, at import or at exit, or what a subprocess of it
# writes, never mixes with the result (nor forges it by printing JSON of its own). Code
# of a layer runs in this process and could still reach the copy on purpose: the probe's
# result is a diagnosis of the layers' imports, not a security check of them.
import importlib, importlib.metadata as md, json, os, sys, tempfile, traceback

_RESULT = os.dup(1)  # os.dup's copy is close-on-exec: no subprocess inherits it
_null = os.open(os.devnull, os.O_WRONLY)
sys.stdout.flush()
os.dup2(_null, 1)
os.close(_null)

arg = json.loads(sys.argv[1])
site, known = arg["site"], arg["submodules"]
out = {"python": sys.version.split()[0], "prefix": sys.prefix, "imported": [], "failed": {},
       "failures": [], "warnings": []}


def tops(d):
    names = (d.read_text("top_level.txt") or "").split()
    if names:
        return names
    seen = []
    for f in d.files or []:
        parts = f.parts
        first = parts[0]
        if first.endswith((".dist-info", ".data", ".libs", ".pth")) or first in ("__pycache__", "..", "bin"):
            continue
        if len(parts) == 1:
            if first.endswith(".py"):
                first = first[:-3]
            elif ".cpython-" in first or first.endswith(".abi3.so"):
                first = first.split(".", 1)[0]
            else:
                continue
        if first not in seen:
            seen.append(first)
    return seen or [d.metadata["Name"].replace("-", "_").lower()]


def probe(mod, optional=False):
    try:
        tmp = tempfile.TemporaryFile()
    except OSError:
        tmp = None
    if tmp is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
    err = None
    try:
        importlib.import_module(mod)
    except (Exception, SystemExit) as e:
        err = e
    finally:
        if tmp is not None:
            for f in (sys.stdout, sys.stderr):
                try:
                    f.flush()
                except Exception:
                    pass
            os.dup2(saved, 2)
            os.close(saved)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.close(null)
            tmp.seek(0)
            text = tmp.read(16384).decode("utf-8", "replace").strip()
            tmp.close()
            if text:
                out["warnings"].append({"module": mod, "text": text})
    if err is None:
        out["imported"].append(mod)
        return True
    if optional and isinstance(err, ModuleNotFoundError) and err.name == mod:
        return False  # a known submodule this version does not have: nothing to report
    msg = str(err)
    lines = traceback.format_exception(type(err), err, err.__traceback__)
    lines = "".join(lines).rstrip("\n").split("\n")[-8:]
    out["failed"][mod] = f"{type(err).__name__}: {msg}"
    out["failures"].append({"module": mod, "type": type(err).__name__, "message": msg, "lines": lines})
    return False


mods = []
for d in md.distributions():
    if site not in str(getattr(d, "_path", "")):
        continue
    for t in tops(d):
        if t.startswith("_") or not t.isidentifier() or t in mods:
            continue
        mods.append(t)
for t in sorted(mods):
    if probe(t):
        for sub in known.get(t, []):
            probe(sub, optional=True)
view = memoryview((json.dumps(out) + "\n").encode())
while view:
    view = view[os.write(_RESULT, view):]
