"""docs/OPERATIONS.md, "When the disk fills, a fork fails or a file is damaged": its shell
blocks run as written against a server on a real full disk (a small tmpfs filled to
ENOSPC) and under a real fork limit (a pids cgroup), with the faults of
streamdb-crashtest --faults.  Root only: the tests skip elsewhere.

The section's other statements are each checked where the behaviour lives:
- a full disk answers reads, PING and INFO, holds only replies waiting for durability,
  and a held client that hangs up stops nobody: tests/persistence/test_disk_full.py;
- a BGSAVE/BGREWRITEAOF that meets a full disk at its rotation fails as a whole and the
  AOF goes on in the segment the manifest names: test_aof_faults.py
  (test_a_rotation_whose_manifest_cannot_be_saved_keeps_every_acknowledged_write);
- a failed fork: Redis's reply and log line, MISCONF until a save succeeds, the
  directives, backed-off retries: tests/persistence/test_fork_failures.py;
- damaged or missing files stop the start naming the file and the way out:
  test_aof_faults.py, test_snapshot_faults.py, test_aof.py, test_tools.py;
- a cut full sync keeps the replica's old data: tests/replication/test_fullsync_aside.py;
- the crash tool's own behaviour: tests/persistence/test_crashtest.py."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import redis

from docblocks import run_block
from helpers import ROOT, ServerProcess, wait_until
from streamdb.cli.faults import FaultDisk, FaultSetupError, ForkLimit

GUIDE = "docs/OPERATIONS.md"
DOC_BLOCKS = {"docs/OPERATIONS.md": {"persistence-status", "bgsave-after-fork-failure"}}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs and a pids cgroup need root")


def _status(port: int) -> dict[str, str]:
    out = run_block(GUIDE, "persistence-status", cwd=ROOT, PORT=port)
    return dict(line.split(":", 1) for line in out.splitlines())


def _fault_disk(path: Path, size: int) -> FaultDisk:
    try:
        return FaultDisk(str(path), size).__enter__()
    except FaultSetupError as e:
        pytest.skip(str(e))


def _until_held(port: int) -> socket.socket:
    """XADDs from one connection until one's reply does not come: the write the full disk holds."""
    s = socket.create_connection(("127.0.0.1", port), timeout=1)
    for i in range(10_000):
        s.sendall(b"XADD s * n %d pad %s\r\n" % (i, b"x" * 200))
        try:
            reply = s.recv(1000)
        except socket.timeout:
            return s
        assert reply.startswith((b"$", b"-MISCONF")), reply
    raise AssertionError("every write was answered on a full disk")


def test_a_full_disk_refuses_writes_holds_the_reply_and_resumes_once_freed(tmp_path):
    disk = _fault_disk(tmp_path / "disk", 4 << 20)
    try:
        # The log goes off the full disk; no preallocated zeros: appends meet ENOSPC at once.
        with ServerProcess(Path(disk.mountpoint), "--appendonly", "yes", "--appendfsync", "always",
                           "--save", "", "--aof-preallocate", "0",
                           "--logfile", str(tmp_path / "server.log")) as srv:
            r = redis.Redis(port=srv.port, socket_timeout=20)
            r.xadd("s", {"n": "first"})
            disk.fill()
            held = _until_held(srv.port)
            with pytest.raises(redis.ResponseError,
                               match="^MISCONF Errors writing to the AOF file: No space left on device$"):
                r.xadd("s", {"n": "refused"})
            assert r.ping() and r.xlen("s") >= 1            # reads and PING are answered
            status = _status(srv.port)
            assert status["aof_last_write_status"] == "err"
            assert status["aof_last_write_error"] == "No space left on device"
            log = (tmp_path / "server.log").read_text()
            assert "Error writing to the AOF file: No space left on device" in log

            disk.free()                                     # nothing else: the server resumes by itself
            held.settimeout(120)
            written = held.recv(1000)
            assert written.startswith(b"$"), written        # the held write is acknowledged now
            wait_until(lambda: _status(srv.port)["aof_last_write_status"] == "ok", timeout=120)
            assert "AOF write error solved: writes accepted again" in (tmp_path / "server.log").read_text()
            r.xadd("s", {"n": "after"})
            entry_id = written.split(b"\r\n")[1]
            srv.kill9()
        with ServerProcess(Path(disk.mountpoint), "--appendonly", "yes", "--save", "",
                           "--logfile", str(tmp_path / "server.log")) as again:
            assert redis.Redis(port=again.port).xrange("s", entry_id, entry_id)
    finally:
        disk.__exit__(None, None, None)


def test_a_bgsave_refused_under_a_fork_limit_succeeds_once_the_limit_is_raised(tmp_path):
    with ServerProcess(tmp_path / "data", "--appendonly", "yes", "--save", "") as srv:
        r = redis.Redis(port=srv.port)
        r.xadd("s", {"n": 1})
        try:
            forks = ForkLimit(f"streamdb-test-{os.getpid()}-{tmp_path.name}").__enter__()
        except FaultSetupError as e:
            pytest.skip(str(e))
        try:
            forks.clamp(srv.proc.pid)
            with pytest.raises(redis.ResponseError):
                r.bgsave()
            assert r.ping() and r.xlen("s") == 1
        finally:
            forks.__exit__(None, None, None)
        out = run_block(GUIDE, "bgsave-after-fork-failure", cwd=ROOT, PORT=srv.port)
        assert out.splitlines()[-1] == "rdb_last_bgsave_status:ok"
        r.xadd("s", {"n": 2})                               # writes are accepted again
