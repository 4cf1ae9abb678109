"""Builds the compiled core (Cython) when ``pip install`` runs; the metadata is in pyproject.toml.

Each compiled module has a plain Python twin with the same interface, so a build
that cannot happen (no C compiler, no Python headers, Cython missing) leaves the
installation working on the Python path: the failure is reported, not raised,
and the server says which path runs (start-up log, ``INFO server`` streamdb_core).
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

# The modules written to be compiled, listed in streamdb/compiled.py (the runtime
# reads the same list); read without importing the package.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "streamdb"))
from compiled import COMPILED_SOURCES  # noqa: E402

# Pure-mode sources are ordinary Python too: their annotations type the compiled
# form (cython.int, cclass attributes); plain ones (list, dict) are checked as Cython does.
DIRECTIVES = {"language_level": 3, "binding": True}


def extensions() -> list:
    try:
        from Cython.Build import cythonize
    except ImportError as e:
        print(f"streamdb: Cython missing ({e}): the compiled core is not built, "
              "the server runs on the Python path", file=sys.stderr)
        return []
    try:
        return cythonize(list(COMPILED_SOURCES), compiler_directives=DIRECTIVES, quiet=True)
    except Exception as e:  # noqa: BLE001 (the tests that need the compiled core fail loudly)
        print(f"streamdb: Cython could not translate the compiled core ({e}): the server "
              "runs on the Python path", file=sys.stderr)
        return []


class OptionalBuildExt(build_ext):
    """A failed compile is a warning: the plain twins serve instead."""

    failed = False

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 (any compiler or linker failure)
            if not self.failed:     # (else: only the copy of what failed to build)
                self.report(e, "the compiled core")

    def build_extension(self, ext) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            self.report(e, ext.name)

    def report(self, error: Exception, name: str) -> None:
        self.failed = True
        print(f"streamdb: could not build {name} ({error}): the server runs on the "
              "Python path", file=sys.stderr)


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
