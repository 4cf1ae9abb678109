"""Which of StreamDB's modules run compiled, and the switch to the plain Python path.

The hot path is compiled with Cython when ``pip install`` runs (setup.py reads
``COMPILED_SOURCES`` from here).  Two kinds of compiled module exist:

* ``.pyx`` twins (``protocol/_resp.pyx``): a module of its own beside the plain
  modules it mirrors; ``protocol/__init__.py`` picks one of the two.
* Pure-mode modules (``engine/ids.py``, ...): one ``.py`` source that runs as it
  is under the interpreter and, typed with ``cython`` annotations, is also
  compiled into an extension module of the same name beside it.  Python's import
  system prefers the extension module, so the source is the readable
  specification and the build is its compiled form: there is no second text.

``install_source_finder`` (run by ``streamdb/__init__.py``) makes the import
system take a pure-mode module's source instead of its extension module when
``STREAMDB_PURE=1`` is set, and when the source (or the ``.pxd`` beside it, which
declares the compiled form's C fields) is newer than its build: an edited file
whose extension was not rebuilt would otherwise silently run the old code.
``status()`` says which path runs, for the start-up log and ``INFO server``.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

__all__ = ["COMPILED_SOURCES", "PURE", "install_source_finder", "status"]

# Every compiled module's source, relative to the project root (setup.py builds these).
COMPILED_SOURCES = (
    "streamdb/protocol/_resp.pyx",
    "streamdb/engine/ids.py",
    "streamdb/engine/stream.py",
    "streamdb/engine/sortedids.py",
    "streamdb/engine/groups.py",
    "streamdb/engine/policies.py",
    "streamdb/engine/keyspace.py",
    # (a metrics scrape asks every group its lag, time lag and oldest pending age:
    # 54.7 -> 46.4 million instructions a scrape of 300 streams x 3 groups, callgrind)
    "streamdb/engine/lag.py",
    # (a metrics scrape's per-value loops: each value's text and the absent ones)
    "streamdb/server/columns.py",
    # (the handlers' COUNT, keyword and id parsing: interpreted, an XADD/XREADGROUP/
    # XACK/XRANGE mix measured 44.4k -> 45.6k instructions a request, callgrind)
    "streamdb/commands/args.py",
    "streamdb/commands/streams.py",
    "streamdb/commands/groups.py",
    "streamdb/dispatch/registry.py",
    "streamdb/dispatch/effects.py",
    "streamdb/dispatch/context.py",
    "streamdb/server/observer.py",
    "streamdb/dispatch/client.py",
    "streamdb/server/core.py",
    "streamdb/server/pipeline.py",
    "streamdb/persistence/changes.py",
    "streamdb/dispatch/pubsub.py",
    "streamdb/commands/pubsub.py",
)

PURE = os.environ.get("STREAMDB_PURE", "") not in ("", "0")

_EXTENSION_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def _module_name(source: str) -> str:
    return source.rsplit(".", 1)[0].replace("/", ".")


# The pure-mode modules: a .py source that is also built as an extension.
PURE_MODE_MODULES = frozenset(_module_name(s) for s in COMPILED_SOURCES if s.endswith(".py"))

# module name -> why its source runs instead of its build (STREAMDB_PURE, a stale build).
_source_instead: dict[str, str] = {}


def _source_beside(path: str, name: str) -> str:
    """The .py source of module ``name`` whose file (source or extension) is ``path``."""
    return os.path.join(os.path.dirname(path), name.rsplit(".", 1)[1] + ".py")


class _SourceFinder:
    """A meta path finder for the pure-mode modules only: their source when the
    extension must not run, else nothing (the normal finders load the extension)."""

    @staticmethod
    def find_spec(fullname: str, path=None, target=None):
        if fullname not in PURE_MODE_MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not (spec.origin or "").endswith(_EXTENSION_SUFFIXES):
            return None           # not built: the source loads the normal way
        source = _source_beside(spec.origin, fullname)
        if not os.path.exists(source):
            return None
        # The build's inputs: the source and, when there is one, the .pxd that
        # declares its C fields (Cython reads it beside the .py).
        inputs = [source] + [p for p in (source[:-3] + ".pxd",) if os.path.exists(p)]
        if PURE:
            why = "STREAMDB_PURE is set"
        elif max(map(os.path.getmtime, inputs)) > os.path.getmtime(spec.origin):
            why = (f"stale build: {fullname.replace('.', '/')}.py or its .pxd is newer than "
                   "its compiled module (pip install -e . rebuilds it)")
        else:
            return None
        _source_instead[fullname] = why
        return importlib.util.spec_from_file_location(fullname, source)


def install_source_finder() -> None:
    if not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())


def is_compiled(module) -> bool:
    return (getattr(module, "__file__", None) or "").endswith(_EXTENSION_SUFFIXES)


def status(parser_core: str, parser_reason: str) -> tuple[str, str]:
    """``("compiled", what)`` when every compiled module runs compiled, else
    ``("python", why)``: the first reason one of them runs from its source.
    ``parser_core``/``parser_reason``: the parser's choice (``protocol.CORE``,
    ``protocol.CORE_REASON``), made by protocol/__init__.py, which imports this module."""
    if parser_core != "compiled":
        return "python", parser_reason
    for name in sorted(PURE_MODE_MODULES):
        module = importlib.import_module(name)
        if not is_compiled(module):
            return "python", _source_instead.get(
                name, f"the compiled core is not built ({name} has no extension module)")
    return "compiled", f"{len(COMPILED_SOURCES)} modules compiled"


def load_source(name: str):
    """A pure-mode module run from its source whatever the build, under the name
    ``<name>__source`` (beside the compiled one): what the property tests hold the
    compiled form equal to."""
    module = importlib.import_module(name)
    spec = importlib.util.spec_from_file_location(name + "__source",
                                                  _source_beside(module.__file__, name))
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    return source
