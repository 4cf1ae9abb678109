"""The README's two set-up commands: `make run` installs only what the server needs,
`make test` what the tests need, and switching from one to the other installs the rest.

`make -n` (print the commands, run none) on a copy of the Makefile and pyproject.toml
shows what each target would install from a given state of the venv."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from helpers import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SPARK_AND_TEST_PACKAGES = {"pyspark", "pyarrow", "pytest", "pytest-timeout", "hypothesis", "selenium"}

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!;\[ ]", r, maxsplit=1)[0].lower() for r in requirements}


def _planned_installs(tmp_path: Path, target: str) -> list[str]:
    """The pip install commands `make <target>` would run in this state of the venv."""
    out = subprocess.run(["make", "-n", target], cwd=tmp_path, capture_output=True,
                         text=True, check=True, timeout=30).stdout
    return [line for line in out.splitlines() if "pip install" in line and "--upgrade pip" not in line]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "Makefile", tmp_path)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def _venv_made_by(project: Path, stamp: str) -> None:
    """A venv as an earlier make left it: the interpreter and the stamp, newer than pyproject.toml."""
    (project / ".venv" / "bin").mkdir(parents=True)
    later = time.time() + 5
    for path in (project / ".venv" / "bin" / "python", project / ".venv" / stamp):
        path.touch()
        os.utime(path, (later, later))


def test_the_runtime_dependencies_hold_no_spark_or_test_package():
    assert not _names(PYPROJECT["project"]["dependencies"]) & SPARK_AND_TEST_PACKAGES
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"pyspark", "pyarrow"} <= _names(extras["spark"])
    assert not {"pyspark", "pyarrow"} & _names(extras["test"])


def test_make_run_on_a_fresh_clone_installs_the_project_without_extras(project):
    assert _planned_installs(project, "run") == [".venv/bin/python -m pip install -q -e ."]


def test_make_test_after_make_run_installs_the_test_and_spark_extras(project):
    _venv_made_by(project, ".installed-run")
    assert _planned_installs(project, "run") == []
    assert _planned_installs(project, "test") == [".venv/bin/python -m pip install -q -e '.[test,spark]'"]


def test_make_run_after_make_test_installs_nothing_more(project):
    _venv_made_by(project, ".installed-test")
    (project / ".venv" / ".installed-run").touch()
    os.utime(project / ".venv" / ".installed-run", (time.time() + 5,) * 2)
    assert _planned_installs(project, "run") == []
    assert _planned_installs(project, "test") == []


def test_make_spark_deps_installs_the_spark_extra_without_compiling_the_core_again(project):
    """`pip install -e '.[spark]'` would rebuild the package (two more minutes of Cython):
    the extra's requirements, read from pyproject.toml, are installed on their own."""
    _venv_made_by(project, ".installed-run")
    out = subprocess.run(["make", "-n", "spark-deps"], cwd=project, capture_output=True,
                         text=True, check=True, timeout=30).stdout
    assert "['optional-dependencies']['spark']" in out
    assert "pip install -q -r .venv/spark-requirements.txt" in out
    assert "-e" not in " ".join(_planned_installs(project, "spark-deps")).split()


def test_the_installs_that_compile_say_so_before_they_start(project):
    """`make run` compiles the core for about two minutes: it says what it does first."""
    for target in ("run", "test"):
        out = subprocess.run(["make", "-n", target], cwd=project, capture_output=True,
                             text=True, check=True, timeout=30).stdout
        lines = out.splitlines()
        install = next(i for i, line in enumerate(lines) if "pip install -q -e" in line)
        assert any("compiling" in line and "Cython" in line for line in lines[:install])


def test_make_test_rebuilds_an_edited_compiled_module(project):
    """The install compiles the core: an edit to a .pyx after it means installing again."""
    _venv_made_by(project, ".installed-test")
    (project / ".venv" / ".installed-run").touch()
    pyx = project / "streamdb" / "protocol" / "_resp.pyx"
    pyx.parent.mkdir(parents=True)
    pyx.touch()
    os.utime(pyx, (time.time() + 10,) * 2)
    assert _planned_installs(project, "test") == [".venv/bin/python -m pip install -q -e '.[test,spark]'"]


def test_make_test_installs_prometheus_and_make_run_does_not(project):
    """The dashboard's test runs Debian's Prometheus: `make test` installs it when it is
    missing (only the package, not its recommended node exporter); the server needs none."""
    def planned(target: str) -> str:
        return subprocess.run(["make", "-n", target], cwd=project, capture_output=True,
                              text=True, check=True, timeout=30).stdout
    assert "apt-get install -y -qq --no-install-recommends prometheus" in planned("test")
    assert "prometheus" not in planned("run")
