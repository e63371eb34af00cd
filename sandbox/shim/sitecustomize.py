# pylayer sitecustomize: makes pylayer layers behave like site-packages.
#
# PYTHONPATH puts the layers' site-packages before the standard library, where a
# wheel's top-level module (enum.py from enum34, typing.py ...) would shadow the
# stdlib. This moves them, keeping their order, to just before the interpreter's
# own site directories (where pip would have installed them) and processes their
# .pth files as site.addsitedir does for site-packages. Then the interpreter's own
# sitecustomize, if any, runs.
import os
import site
import sys


def _pylayer_setup():
    prefix = "/opt/pylayer/layers/"
    layers = [p for p in sys.path if p.startswith(prefix)]
    rest = [p for p in sys.path if not p.startswith(prefix)]
    sitedirs = set(site.getsitepackages())
    at = next((i for i, p in enumerate(rest) if p in sitedirs), len(rest))
    sys.path[:] = rest[:at] + layers + rest[at:]
    for d in layers:
        site.addsitedir(d)
    # The interpreter's own sitecustomize, if any, is imported by name with this
    # directory out of the path. importlib.util and importlib.machinery are not
    # used: importing them (and warnings, which they import) cost 2-4 ms of every
    # interpreter start. The import lock of this module is re-entrant.
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.path[:]
    sys.path[:] = [p for p in path if os.path.abspath(p or ".") != here]
    mine = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401
    except ImportError as e:
        if e.name != "sitecustomize":
            raise
    finally:
        sys.path[:] = path
        if "sitecustomize" not in sys.modules and mine is not None:
            sys.modules["sitecustomize"] = mine


_pylayer_setup()
del _pylayer_setup
