"""README.md's shell blocks, run as written against real servers (tests/docblocks.py).

The README speaks of port 6379 (the server `make run` starts), 6380 (a replica) and 9121
(metrics), and of ./data: each test runs a block in its own directory, with its servers'
free ports in place of those numbers.  The Spark block runs in tests/spark."""

from __future__ import annotations

import signal
import urllib.request

import pytest
import redis

from docblocks import run_block, start_block
from helpers import ServerProcess
from streamdb.cli.procs import free_port, wait_until_ready

README = "README.md"
DOC_BLOCKS = {"README.md": {"scripts", "tour", "durability", "crashtest", "check-files", "replica",
                            "replica-check", "security", "admin", "metrics"}}


def _run(name: str, tmp_path, srv=None, timeout: float = 60, ports: dict | None = None) -> str:
    mapping = {6379: srv.port} if srv else {}
    mapping.update(ports or {})
    return run_block(README, name, cwd=tmp_path, ports=mapping, timeout=timeout)


def test_the_console_scripts_answer_version_and_help(tmp_path):
    out = _run("scripts", tmp_path)
    assert out.startswith("StreamDB server v=")
    assert "usage" in out.lower()
    assert "streamdb-admin" in out and "claim-idle" in out


def test_the_tour_and_the_admin_commands(tmp_path):
    with ServerProcess(tmp_path / "data", "--save", "") as srv:
        out = _run("tour", tmp_path, srv)
        lines = out.splitlines()
        assert lines[0] == "OK"                         # XGROUP CREATE (the XADD went into $ID)
        assert "orders" in lines and "book" in lines    # XREADGROUP delivered the entry
        assert lines[lines.index("book") + 3] == "1"    # XACK acknowledged it
        r = redis.Redis(port=srv.port)
        assert r.xpending("orders", "billing")["pending"] == 0

        r.xreadgroup("billing", "worker-2", {"orders": "0"})    # (nothing pending: no change)
        out = _run("admin", tmp_path, srv)
        assert "billing" in out and "orders" in out
        assert "Dead letters in orders:dlq (0)" in out  # no policy: nothing dead-lettered


def test_durability_commands(tmp_path):
    with ServerProcess(tmp_path / "data", "--appendonly", "yes", "--save", "") as srv:
        out = _run("durability", tmp_path, srv)
        assert out.splitlines()[:2] == ["OK", "Background saving started"]
        assert "aof_enabled:1" in out and "aof_last_write_status:ok" in out
        assert redis.Redis(port=srv.port).config_get("appendfsync") == {"appendfsync": "always"}


def test_the_crash_test_commands_exit_0(tmp_path):
    _run("crashtest", tmp_path, timeout=280)


def test_the_offline_file_checks(tmp_path):
    with ServerProcess(tmp_path / "data", "--appendonly", "yes", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        r.xadd("orders", {"item": "book"})
        r.save()
    out = _run("check-files", tmp_path)
    assert "AOF is valid" in out


def test_a_replica_started_and_compared_as_the_readme_says(tmp_path):
    with ServerProcess(tmp_path / "data", "--save", "") as primary:
        redis.Redis(port=primary.port).xadd("orders", {"item": "book"})
        replica_port = free_port()
        ports = {6379: primary.port, 6380: replica_port}
        replica = start_block(README, "replica", cwd=tmp_path, ports=ports)
        try:
            wait_until_ready(replica_port, replica)
            out = run_block(README, "replica-check", cwd=tmp_path, ports=ports)
            assert out.splitlines()[:2] == ["slave", "127.0.0.1"]
            assert redis.Redis(port=replica_port).xlen("orders") == 1
            assert (tmp_path / "data-replica").is_dir()
        finally:
            replica.send_signal(signal.SIGTERM)
            assert replica.wait(timeout=20) == 0


def test_the_security_commands(tmp_path):
    with ServerProcess(tmp_path / "data", "--save", "") as srv:
        out = _run("security", tmp_path, srv)
        lines = out.splitlines()
        assert lines[0] == "OK"
        assert lines[2] == "1"                          # alice's XADD, then her XLEN
        r = redis.Redis(port=srv.port)
        assert r.acl_getuser("alice")["enabled"]
        alice = redis.Redis(port=srv.port, username="alice", password="s3cret")
        with pytest.raises(redis.exceptions.NoPermissionError):
            alice.delete("orders")


def test_the_metrics_endpoint(tmp_path):
    metrics_port = free_port()
    with ServerProcess(tmp_path / "data", "--save", "", "--metrics-port", str(metrics_port)) as srv:
        r = redis.Redis(port=srv.port)
        r.xadd("orders", {"item": "book"})
        r.xgroup_create("orders", "billing", id="0")
        urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read()
        out = _run("metrics", tmp_path, srv, ports={9121: metrics_port})
        assert 'streamdb_stream_length{db="0",key="orders"} 1' in out
        assert "streamdb_group_lag" in out


def test_the_shipped_config_serves_the_metrics_the_readme_reads():
    """After `make run` (the shipped streamdb.conf) the README's curl must find an endpoint:
    the file turns it on, on loopback, at the port the README names."""
    from helpers import ROOT
    from streamdb.config import Config
    cfg = Config()
    cfg.load_file(str(ROOT / "streamdb.conf"))
    readme = (ROOT / README).read_text()
    assert f"curl -s http://127.0.0.1:{cfg['metrics-port']}/metrics" in readme
    assert cfg["metrics-bind"] == "127.0.0.1"
