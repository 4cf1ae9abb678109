"""docs/OPERATIONS.md is tested: its ``<!-- guide-test: NAME -->`` shell blocks run as written
(bash, the guide's variables set) against real server processes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis

from helpers import ROOT, ServerProcess, corrupt_aof_frame
from streamdb.tools.procs import free_port, wait_until_ready

GUIDE = ROOT / "docs" / "OPERATIONS.md"
BLOCK = re.compile(r"<!-- guide-test: (\w+) -->\n```sh\n(.*?)```", re.S)


def _blocks() -> dict[str, str]:
    return dict(BLOCK.findall(GUIDE.read_text()))


def _env(**variables) -> dict[str, str]:
    env = dict(os.environ)
    # streamdb-server and the tools as installed next to this interpreter; redis-cli from the system.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update({k: str(v) for k, v in variables.items()})
    return env


def _run_block(name: str, **variables) -> str:
    proc = subprocess.run(["bash", "-eu", "-c", _blocks()[name]], env=_env(**variables),
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, f"guide block {name!r} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _fill(port: int) -> str:
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


def test_the_guide_marks_the_blocks_this_file_runs():
    assert set(_blocks()) == {"backup", "restore", "replicate", "promote", "stop", "repair"}


def test_backup_with_bgsave_and_copy_then_restore_on_another_port(tmp_path):
    data, backup = tmp_path / "data", tmp_path / "backup"
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as srv:
        digest = _fill(srv.port)
        out = _run_block("backup", PORT=srv.port, DATA=data, BACKUP=backup)
        assert "Background saving started" in out
        assert (backup / "snapshot.lmdb").is_dir() and (backup / "appendonlydir").is_dir()

        # The restore block is one command: run it as the server process itself.
        restore_port = free_port()
        restored = subprocess.Popen(["bash", "-eu", "-c", "exec " + _blocks()["restore"]],
                                    env=_env(RESTORE_PORT=restore_port, BACKUP=backup),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
        digest = _fill(primary.port)
        out = _run_block("replicate", PORT=primary.port, REPLICA_PORT=replica.port)
        assert out.splitlines()[:5] == ["OK", "slave", "127.0.0.1", str(primary.port), "connected"]
        r_replica = redis.Redis(port=replica.port)
        _wait_until(lambda: r_replica.execute_command("DEBUG", "DIGEST") == digest)
        with_more = redis.Redis(port=primary.port)
        with_more.xadd("sensor:0", {"temperature": "30.1"}, id="9999999999999-0")
        _wait_until(lambda: r_replica.xlen("sensor:0") == 101)

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
        digest = _fill(srv.port)
        _run_block("stop", PIDFILE=pidfile)
        assert srv.proc.wait(timeout=20) == 0
    finally:
        srv.stop()
    assert not pidfile.exists()
    with ServerProcess(data, "--save", "") as again:
        assert redis.Redis(port=again.port).execute_command("DEBUG", "DIGEST") == digest


def test_repair_cuts_a_corrupt_aof_and_the_server_starts_with_what_came_before(tmp_path):
    data = tmp_path / "data"
    with ServerProcess(data, "--appendonly", "yes", "--appendfsync", "always", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        for i in range(1, 21):
            r.xadd("orders", {"n": i}, id=f"{i}-0")
    corrupt_aof_frame(next((data / "appendonlydir").glob("*.incr.aof")), 12)
    refused = ServerProcess(data, "--save", "")
    try:
        refused.start()
        raise AssertionError("the server started on a corrupt AOF")
    except RuntimeError:
        pass
    finally:
        refused.stop()
    out = _run_block("repair", DATA=data)
    assert "7 valid frames (7 commands) after it" in out and "Successfully truncated" in out
    with ServerProcess(data, "--save", "") as again:
        assert redis.Redis(port=again.port).xlen("orders") == 12
