"""Which core a server runs (compiled or plain Python) is its choice, visible to
an operator: the start-up log and ``INFO server`` (streamdb_core) say it, and
STREAMDB_PURE=1 or a core that was never built gives the Python path, which
serves the same replies."""

from __future__ import annotations

import shutil

import redis

from helpers import ROOT, ServerProcess
from streamdb import protocol


def core_of(srv: ServerProcess) -> str:
    with redis.Redis(port=srv.port) as r:
        return r.info("server")["streamdb_core"]


def serves_streams(srv: ServerProcess) -> None:
    with redis.Redis(port=srv.port) as r:
        pipe = r.pipeline(transaction=False)
        for i in range(50):
            pipe.xadd("s", {"f": i}, id=f"1-{i + 1}")
        pipe.xlen("s")
        assert pipe.execute()[-1] == 50
        assert r.xrange("s", count=1) == [(b"1-1", {b"f": b"0"})]


def test_the_server_says_which_core_runs(server):
    # The test process and the server it started made the same choice.
    assert core_of(server) == protocol.CORE
    banner = "Core: compiled" if protocol.CORE == "compiled" else "Core: python, slower"
    assert banner in server.log_text()


def test_streamdb_pure_runs_the_python_path(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMDB_PURE", "1")
    with ServerProcess(tmp_path) as srv:
        assert core_of(srv) == "python"
        assert "Core: python, slower (STREAMDB_PURE is set)" in srv.log_text()
        serves_streams(srv)


def test_a_core_that_was_never_built_leaves_the_python_path(tmp_path, monkeypatch):
    """The package as an install without a C compiler leaves it: no extension module."""
    unbuilt = tmp_path / "src"
    shutil.copytree(ROOT / "streamdb", unbuilt / "streamdb",
                    ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    monkeypatch.setenv("PYTHONPATH", str(unbuilt))
    monkeypatch.setenv("PYTHONSAFEPATH", "1")     # not the checkout the server starts in
    monkeypatch.delenv("STREAMDB_PURE", raising=False)
    with ServerProcess(tmp_path / "data") as srv:
        assert core_of(srv) == "python"
        assert "the compiled core is not built" in srv.log_text()
        serves_streams(srv)
