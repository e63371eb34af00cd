# pylayer sitecustomize: makes pylayer layers behave like site-packages.
#
# PYTHONPATH puts the layers' site-packages before the standard library, where a
# wheel's top-level module (enum.py from enum34, typing.py ...) would shadow the
# stdlib. This moves them, keeping their order, to just before the interpreter's
# own site directories (where pip would have installed them) and processes their
# .pth files as site.addsitedir does for site-packages. Then the interpreter's own
# sitecustomize, if any, runs.
import importlib.machinery
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
    here = os.path.dirname(os.path.abspath(__file__))
    others = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        # Imported only now: importlib.util costs a few ms of every interpreter start.
        from importlib.util import module_from_spec

        mod = module_from_spec(spec)
        spec.loader.exec_module(mod)


_pylayer_setup()
del _pylayer_setup
