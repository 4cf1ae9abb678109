"""The console scripts are the documented way in: each one's entry point exists, answers
--help under its own name with a description, and the Spark one fails cleanly without pyspark."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from helpers import ROOT

SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def run_script(name: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``name`` as pyproject.toml declares it (installed or not: the tree's own code runs)."""
    module, func = SCRIPTS[name].split(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env=env)


def test_the_operator_tools_all_have_console_scripts():
    assert {"streamdb-check-aof", "streamdb-crashtest", "streamdb-snapshot", "streamdb-admin",
            "streamdb-compare-replica", "streamdb-loadtest", "streamdb-spark"} <= set(SCRIPTS)
    # Tools behind a console script have no second way in under tools/.
    assert sorted(p.name for p in (ROOT / "tools").glob("*.py")) == [
        "bench.py", "bench_bigvalue.py", "bench_breakdown.py", "bench_cold.py", "bench_console.py",
        "bench_core.py", "bench_fanout.py", "bench_group_reset.py", "bench_metrics.py",
        "bench_persistence.py", "bench_replication.py", "bench_request.py", "bench_spark.py"]


# streamdb-server's own command line is tested with the server.
@pytest.mark.parametrize("name", sorted(set(SCRIPTS) - {"streamdb-server"}))
def test_every_tool_answers_help_under_its_own_name(name):
    out = run_script(name, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: {name} ")
    description = out.stdout.split("\n\n")[1].strip()
    assert len(description) > 20


@pytest.mark.parametrize("pipeline", ["archive", "reconcile", "group-report"])
def test_spark_pipelines_answer_help(pipeline):
    out = run_script("streamdb-spark", pipeline, "--help")
    assert out.returncode == 0 and out.stdout.startswith(f"usage: streamdb-spark {pipeline} "), out.stderr


def test_streamdb_spark_without_pyspark_says_how_to_install_it(tmp_path, server):
    # An interpreter on which pyspark cannot be imported, as in a venv without the extra.
    (tmp_path / "pyspark").mkdir()
    (tmp_path / "pyspark" / "__init__.py").write_text("raise ImportError(\"No module named 'pyspark'\")\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    out = run_script("streamdb-spark", "group-report", "--url", f"redis://127.0.0.1:{server.port}",
                     env=env)
    assert (out.returncode, out.stderr) == (1, "pyspark is not installed: pip install -e '.[spark]'\n")
