"""The server process's life: SIGTERM/SIGINT/SHUTDOWN exit cleanly with the data on disk,
the pid file, and the data-directory lock that keeps a second server out."""

from __future__ import annotations

import fcntl
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis

from helpers import ROOT, ServerProcess
from streamdb.server.lifecycle import LOCK_NAME
from streamdb.cli.procs import free_port

BYE = "StreamDB is now ready to exit, bye bye..."


def _stop_with(srv: ServerProcess, sig: int) -> int:
    srv.proc.send_signal(sig)
    return srv.proc.wait(timeout=20)


def _fill(port: int, n: int) -> str:
    r = redis.Redis(port=port)
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd("orders", {"item": f"book-{i}", "qty": str(i)})
    pipe.execute()
    r.xgroup_create("orders", "billing", id="0")
    r.xreadgroup("billing", "w1", {"orders": ">"}, count=7)
    digest = r.execute_command("DEBUG", "DIGEST")
    r.close()
    return digest


def _lock_is_free(data_dir: Path) -> bool:
    fd = os.open(data_dir / LOCK_NAME, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _tree_fingerprint(root: Path, skip: set[str]) -> dict[str, str]:
    """Every file under ``root`` (but ``skip``) -> hash of its bytes and its mtime."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name not in skip:
            st = path.stat()
            out[str(path.relative_to(root))] = hashlib.sha1(path.read_bytes()).hexdigest() + f":{st.st_mtime_ns}"
        elif path.is_dir():
            out[str(path.relative_to(root)) + "/"] = "dir"
    return out


def _settled_fingerprint(root: Path, skip: set[str]) -> dict[str, str]:
    """The fingerprint once the running server has finished writing (state files, fsyncs)."""
    deadline = time.monotonic() + 15
    last = _tree_fingerprint(root, skip)
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = _tree_fingerprint(root, skip)
        if now == last:
            return now
        last = now
    raise AssertionError("the data directory kept changing")


def test_sigterm_exits_0_with_aof_fsynced_pidfile_removed_and_lock_released(tmp_path):
    data = tmp_path / "data"
    pidfile = tmp_path / "streamdb.pid"
    # appendfsync no: only the shutdown path fsyncs; save '' so the AOF alone carries the data.
    srv = ServerProcess(data, "--appendonly", "yes", "--appendfsync", "no", "--save", "",
                        "--pidfile", str(pidfile)).start()
    try:
        assert pidfile.read_text().strip() == str(srv.proc.pid)
        assert (data / LOCK_NAME).read_text().strip() == str(srv.proc.pid)
        assert not _lock_is_free(data)
        digest = _fill(srv.port, 500)
        assert _stop_with(srv, signal.SIGTERM) == 0
    finally:
        srv.stop()
    log = srv.log_text()
    assert "Received SIGTERM scheduling shutdown..." in log
    assert "AOF flushed and fsynced on shutdown" in log
    assert log.rstrip().endswith(BYE)
    assert not pidfile.exists()
    assert _lock_is_free(data)

    with ServerProcess(data, "--appendonly", "yes", "--save", "") as again:
        r = redis.Redis(port=again.port)
        assert r.xlen("orders") == 500
        assert r.execute_command("DEBUG", "DIGEST") == digest
        assert r.xpending("orders", "billing")["pending"] == 7


def test_sigint_with_save_rules_snapshots_before_exit(tmp_path):
    data = tmp_path / "data"
    # No AOF: what survives can only come from the snapshot the shutdown wrote.
    srv = ServerProcess(data, "--appendonly", "no", "--save", "3600 1").start()
    try:
        digest = _fill(srv.port, 200)
        assert _stop_with(srv, signal.SIGINT) == 0
    finally:
        srv.stop()
    assert "Received SIGINT scheduling shutdown..." in srv.log_text()
    with ServerProcess(data, "--appendonly", "no", "--save", "") as again:
        r = redis.Redis(port=again.port)
        assert r.execute_command("DEBUG", "DIGEST") == digest


def test_shutdown_command_takes_the_same_path(tmp_path):
    data = tmp_path / "data"
    pidfile = tmp_path / "s.pid"
    srv = ServerProcess(data, "--appendonly", "yes", "--save", "", "--pidfile", str(pidfile)).start()
    try:
        _fill(srv.port, 10)
        reader = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        reader.sendall(b"XREAD BLOCK 0 STREAMS nothing $\r\n")
        r = redis.Redis(port=srv.port)
        r.ping()
        try:
            r.shutdown()
        except redis.ConnectionError:
            pass
        assert srv.proc.wait(timeout=20) == 0
        assert reader.recv(100) == b""            # the blocked client was closed, not left hanging
        reader.close()
    finally:
        srv.stop()
    assert not pidfile.exists()
    assert srv.log_text().rstrip().endswith(BYE)
    assert _lock_is_free(data)


def test_second_server_on_the_same_directory_refuses_and_changes_nothing(tmp_path):
    data = tmp_path / "data"
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as first:
        r = redis.Redis(port=first.port)
        _fill(first.port, 50)
        r.save()                                   # a snapshot on disk too
        before = _settled_fingerprint(data, skip={first.log_path.name})
        assert LOCK_NAME in before
        pidfile = tmp_path / "second.pid"
        second = subprocess.run(
            [sys.executable, "-m", "streamdb", "--port", str(free_port()), "--dir", str(data),
             "--pidfile", str(pidfile)],
            cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert second.returncode == 1
        assert (f"Can't lock the data directory {data.resolve()}: it is in use by another "
                f"StreamDB server (pid {first.proc.pid}") in second.stdout
        assert not pidfile.exists()
        assert _tree_fingerprint(data, skip={first.log_path.name}) == before
        # The first server is untouched and still serving.
        assert r.xlen("orders") == 50


def test_lock_is_released_by_kill_9(tmp_path):
    data = tmp_path / "data"
    srv = ServerProcess(data, "--appendonly", "yes", "--save", "").start()
    _fill(srv.port, 20)
    srv.kill9()
    srv.stop()
    with ServerProcess(data, "--appendonly", "yes", "--save", "") as again:
        assert redis.Redis(port=again.port).xlen("orders") == 20


def _run_server_with(flags: tuple[str, ...], cwd: Path):
    """Each flag through the console script (installed next to this interpreter) and
    through ``python -m streamdb``: the completed processes, checked to exit 0."""
    for cmd in ([str(Path(sys.executable).parent / "streamdb-server")],
                [sys.executable, "-m", "streamdb"]):
        for flag in flags:
            proc = subprocess.run([*cmd, flag], cwd=cwd, capture_output=True, text=True,
                                  timeout=30)
            assert proc.returncode == 0, proc.stderr
            yield proc


def test_help_prints_usage_and_exits_0(tmp_path):
    for proc in _run_server_with(("--help", "-h"), tmp_path):
        assert proc.stderr == ""
        out = proc.stdout
        assert out.startswith("Usage: streamdb-server [/path/to/streamdb.conf] [--directive value ...]\n")
        assert "streamdb-server --port 7777 --replicaof 127.0.0.1 6379" in out
        assert f"\n       {ROOT / 'streamdb.conf'}\n" in out      # where the shipped file is
        assert "port 6379, bind 127.0.0.1" in out
        assert not list(tmp_path.iterdir())                      # no server started: no ./data


def test_version_prints_one_line_and_exits_0(tmp_path):
    import platform
    from streamdb import __version__
    for proc in _run_server_with(("--version", "-v"), tmp_path):
        assert proc.stdout == (f"StreamDB server v={__version__} "
                               f"python={platform.python_version()} bits=64\n")
