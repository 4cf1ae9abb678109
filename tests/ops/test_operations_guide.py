"""docs/OPERATIONS.md is tested: its ``<!-- guide-test: NAME -->`` shell blocks run as written
(bash, the guide's variables set) against real server processes (tests/docblocks.py)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import redis

from docblocks import run_block, start_block
from helpers import ROOT, ServerProcess
from streamdb.cli.procs import free_port, wait_until_ready

GUIDE = "docs/OPERATIONS.md"
DOC_BLOCKS = {"docs/OPERATIONS.md": {"backup", "restore", "check", "repair", "replicate",
                                     "compare", "promote", "fsync", "stop"}}


def _run_block(name: str, stdin: str | None = None, **variables) -> str:
    return run_block(GUIDE, name, cwd=ROOT, stdin=stdin, **variables)


def fill_sensor_streams(port: int) -> str:
    r = redis.Redis(port=port)
    for i in range(300):
        r.xadd(f"sensor:{i % 3}", {"temperature": f"{19 + i % 7}.5"})
    r.xgroup_create("sensor:0", "alerts", id="0")
    r.xreadgroup("alerts", "w1", {"sensor:0": ">"}, count=25)
    return r.execute_command("DEBUG", "DIGEST")


def _wait_until(check, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_backup_with_bgsave_and_copy_then_restore_on_another_port(tmp_path):
    data, backup = tmp_path / "data", tmp_path / "copy"
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as srv:
        digest = fill_sensor_streams(srv.port)
        out = _run_block("backup", PORT=srv.port, DATA=data, COPY=backup)
        assert "Background saving started" in out
        assert (backup / "snapshot.lmdb").is_dir() and (backup / "appendonlydir").is_dir()

        # The restore block is one command: run it as the server process itself.
        restore_port = free_port()
        restored = start_block(GUIDE, "restore", cwd=ROOT, RESTORE_PORT=restore_port, COPY=backup)
        try:
            wait_until_ready(restore_port, restored)
            copy = redis.Redis(port=restore_port)
            assert copy.execute_command("DEBUG", "DIGEST") == digest
            assert copy.xpending("sensor:0", "alerts")["pending"] == 25
            # The original is unaffected by its copy being served.
            assert redis.Redis(port=srv.port).execute_command("DEBUG", "DIGEST") == digest
        finally:
            restored.send_signal(signal.SIGTERM)
            assert restored.wait(timeout=20) == 0
        assert "Snapshot loaded" in restored.stdout.read()


def test_replicate_then_promote(tmp_path):
    with ServerProcess(tmp_path / "primary", "--save", "") as primary, \
            ServerProcess(tmp_path / "replica", "--save", "") as replica:
        digest = fill_sensor_streams(primary.port)
        out = _run_block("replicate", PORT=primary.port, REPLICA_PORT=replica.port)
        assert out.splitlines()[:5] == ["OK", "slave", "127.0.0.1", str(primary.port), "connected"]
        r_replica = redis.Redis(port=replica.port)
        _wait_until(lambda: r_replica.execute_command("DEBUG", "DIGEST") == digest)
        with_more = redis.Redis(port=primary.port)
        with_more.xadd("sensor:0", {"temperature": "30.1"}, id="9999999999999-0")
        _wait_until(lambda: r_replica.xlen("sensor:0") == 101)
        out = _run_block("compare", PORT=primary.port, REPLICA_PORT=replica.port)
        assert "lag_bytes: 0" in out and "digest: equal" in out

        out = _run_block("promote", REPLICA_PORT=replica.port)
        assert out.splitlines()[0] == "OK"
        assert out.splitlines()[1] == "master"
        assert r_replica.xadd("sensor:0", {"temperature": "31"}) is not None
        assert r_replica.xlen("sensor:0") == 102
        assert with_more.xlen("sensor:0") == 101


def test_stop_with_sigterm_exits_0_and_the_data_survives(tmp_path):
    data, pidfile = tmp_path / "data", tmp_path / "streamdb.pid"
    srv = ServerProcess(data, "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
                        "--pidfile", str(pidfile)).start()
    try:
        digest = fill_sensor_streams(srv.port)
        _run_block("stop", PIDFILE=pidfile)
        assert srv.proc.wait(timeout=20) == 0
    finally:
        srv.stop()
    assert not pidfile.exists()
    with ServerProcess(data, "--save", "") as again:
        assert redis.Redis(port=again.port).execute_command("DEBUG", "DIGEST") == digest


def test_the_offline_checks_on_a_stopped_server(tmp_path):
    data = tmp_path / "data"
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as srv:
        fill_sensor_streams(srv.port)
        redis.Redis(port=srv.port).save()
    out = _run_block("check", DATA=data)
    assert "AOF is valid" in out
    assert "sensor:0" in out


def _write_one_frame_each(port: int, count: int) -> None:
    r = redis.Redis(port=port)
    for i in range(count):      # one request per loop turn: one AOF frame each
        r.xadd("orders", {"marker": f"entry-{i:03d}"})


def test_repair_cuts_a_corrupt_aof_at_the_last_valid_frame(tmp_path):
    data = tmp_path / "data"
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as srv:
        _write_one_frame_each(srv.port, 50)
    segment = max((data / "appendonlydir").glob("*.aof"), key=lambda p: p.stat().st_size)
    raw = bytearray(segment.read_bytes())
    at = raw.index(b"entry-030")
    raw[at] ^= 0x20                 # a flipped bit in the middle of the segment
    segment.write_bytes(bytes(raw))
    refused = ServerProcess(data, "--appendonly", "yes", "--save", "")
    with pytest.raises(RuntimeError, match="exited with 1"):
        refused.start()
    refused.stop()

    out = _run_block("repair", DATA=data)
    assert "Successfully truncated" in out

    with ServerProcess(data, "--appendonly", "yes", "--save", "") as again:
        entries = redis.Redis(port=again.port).xrange("orders")
    assert [fields[b"marker"] for _id, fields in entries] == \
        [f"entry-{i:03d}".encode() for i in range(30)]


def test_fsync_policy_set_at_run_time(tmp_path):
    with ServerProcess(tmp_path / "data", "--appendonly", "yes", "--save", "") as srv:
        out = _run_block("fsync", PORT=srv.port)
        assert out.splitlines() == ["OK", "appendfsync", "always"]
        r = redis.Redis(port=srv.port)
        assert r.xadd("orders", {"item": "book"})
        assert r.info("persistence")["aof_last_write_status"] == "ok"
