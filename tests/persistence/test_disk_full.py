"""A real full disk under the server's --dir: a small tmpfs, filled.

The AOF's write fails with ENOSPC for as long as the disk stays full (not a count
of injected failures that runs out).  Only the replies that wait for durability
wait: under 'always' those of the client whose write failed (and what it sent
after); under 'everysec' none, as in Redis.  Everyone else keeps being answered:
PING, reads, INFO, and MISCONF for writes.  Once space is freed the held reply
arrives, writes work again, and kill -9 loses nothing acknowledged.  (And a failing
fsync under 'everysec', which a tmpfs cannot give: injected.)
"""

from __future__ import annotations

import errno
import socket
import time
from pathlib import Path

import pytest
import redis

from tests.helpers import ServerProcess, wait_until

BIG = 100_000        # bytes of one XADD's value: a few of them use up the room left


class Disk:
    """A tmpfs of its own, and a filler file that takes every byte left on it."""

    def __init__(self, mountpoint: Path) -> None:
        self.path = mountpoint
        self.filler = mountpoint / "filler"

    def fill(self) -> None:
        """Write the filler until not one more byte fits."""
        with open(self.filler, "ab", buffering=0) as f:
            chunk = 1 << 20
            while chunk:
                try:
                    f.write(b"\xff" * chunk)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    chunk //= 2

    def free(self) -> None:
        self.filler.unlink()


@pytest.fixture
def disk(tmp_path, tmpfs):
    return Disk(tmpfs(tmp_path / "disk", "6m"))


def _server(disk: Disk, tmp_path: Path, *args: str) -> ServerProcess:
    srv = ServerProcess(disk.path, "--appendonly", "yes", "--save", "", *args)
    srv.log_path = tmp_path / "server.log"      # outside the full disk, where it can be read
    return srv


def _xadd(id_: str, value: bytes = b"v") -> bytes:
    return b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$%d\r\n%s\r\n$1\r\nf\r\n$%d\r\n%s\r\n" % (
        len(id_), id_.encode(), len(value), value)


def _pending_bytes(sock: socket.socket) -> bytes:
    """What the server sent that is not read yet, without waiting."""
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        return sock.recv(65536)
    except BlockingIOError:
        return b""
    finally:
        sock.settimeout(timeout)


def _recv_reply(sock: socket.socket) -> bytes:
    """One line reply, or a bulk string (the ids and errors these tests get)."""
    data = b""
    while True:
        chunk = sock.recv(1000)
        assert chunk, f"connection closed (after {data!r})"
        data += chunk
        if data.startswith(b"$") and b"\r\n" in data:
            length = int(data[1:data.index(b"\r\n")])
            if len(data) >= data.index(b"\r\n") + 2 + length + 2:
                return data
        elif data.endswith(b"\r\n"):
            return data


def _write_status(r: redis.Redis) -> str:
    return r.info("persistence")["aof_last_write_status"]


def _xadd_until_the_disk_refuses(writer: socket.socket, other: redis.Redis):
    """XADDs of BIG bytes from ``writer`` until one hits ENOSPC (room left in pages and
    preallocated zeros is used up first); returns (acknowledged ids, the failing id)."""
    acked = []
    for i in range(2, 200):
        id_ = f"{i}-1"
        writer.sendall(_xadd(id_, b"x" * BIG))
        # Not acknowledged until written (everysec: the OS has it) or fsynced (always).
        answered = wait_until(lambda: _pending_bytes(writer) or _write_status(other) == "err",
                              what="the XADD's reply or the AOF's write error")
        if answered is True:
            return acked, id_
        while not answered.endswith(b"\r\n"):
            answered += writer.recv(1000)
        assert answered == b"$%d\r\n%s\r\n" % (len(id_), id_.encode())
        acked.append(id_)
    raise AssertionError("the disk never refused a write")


@pytest.mark.parametrize("policy", ["always", "everysec"])
def test_full_disk_refuses_writes_and_answers_everything_else(disk, tmp_path, policy):
    srv = _server(disk, tmp_path, "--appendfsync", policy).start()
    writer = socket.create_connection(("127.0.0.1", srv.port), timeout=15)
    try:
        other = redis.Redis(port=srv.port, socket_timeout=15)
        other.xadd("s", {"f": "v"}, id="1-1")
        disk.fill()
        acked, failing = _xadd_until_the_disk_refuses(writer, other)

        # Not written (everysec) or not durable (always): not acknowledged, under either
        # policy, so a kill -9 now would lose nothing anyone was told was done.
        assert _pending_bytes(writer) == b""
        writer.sendall(b"PING\r\n")                       # queued behind the held reply
        # Everyone else is answered at once: PING, reads, INFO, and MISCONF for writes.
        # (Every XADD sent is applied in memory, the held one too.)
        applied = 1 + len(acked) + 1
        fresh = redis.Redis(port=srv.port, socket_timeout=15)
        for client in (other, fresh):
            assert client.ping()
            assert client.xlen("s") == applied
            assert client.info("persistence")["aof_last_write_status"] == "err"
            with pytest.raises(redis.ResponseError,
                               match="MISCONF Errors writing to the AOF file: No space left"):
                client.xadd("s", {"f": "refused"}, id="10000-1")
        # A transaction holding a write is refused as a whole, a subcommand's too.
        transaction = fresh.pipeline(transaction=True)
        transaction.xgroup_create("s", "refused-group", "0")
        with pytest.raises(redis.exceptions.ExecAbortError, match="because of: MISCONF Errors writing"):
            transaction.execute()
        assert fresh.xinfo_groups("s") == []
        assert _pending_bytes(writer) == b""             # still held

        disk.free()
        reply = _recv_reply(writer)
        while not reply.endswith(b"+PONG\r\n"):
            reply += writer.recv(1000)
        assert reply == b"$%d\r\n%s\r\n+PONG\r\n" % (len(failing), failing.encode())
        acked.append(failing)
        wait_until(lambda: _write_status(other) == "ok", what="the retried write")
        assert other.xadd("s", {"f": "after"}, id="20000-1") == b"20000-1"
        acked.append("20000-1")

        srv.kill9()
        srv.stop()
        srv = _server(disk, tmp_path).start()
        ids = [e[0].decode() for e in redis.Redis(port=srv.port).xrange("s")]
        assert ids == ["1-1"] + acked
        assert "Traceback" not in srv.log_text()
    finally:
        writer.close()
        srv.stop()


def test_a_held_client_that_hangs_up_does_not_stop_the_others(disk, tmp_path):
    """Several clients' writes fail in one turn under 'always': all are held.  Some
    hang up meanwhile; the one left still gets its reply once space is freed."""
    # No preallocated zeros: once the disk is full, the next frame cannot be written.
    srv = _server(disk, tmp_path, "--appendfsync", "always", "--aof-preallocate", "0").start()
    writers = [socket.create_connection(("127.0.0.1", srv.port), timeout=15) for _ in range(4)]
    sleeper = socket.create_connection(("127.0.0.1", srv.port), timeout=15)
    try:
        r = redis.Redis(port=srv.port, socket_timeout=15)
        r.xadd("s", {"f": "v"}, id="1-1")
        disk.fill()
        # The loop sleeps while the writers send, so that it reads their XADDs in one
        # turn: one frame holds them all, and it fails to write.  (The pause lets it
        # fall asleep first: a writer read in the sleeper's turn would be alone.)
        sleeper.sendall(b"DEBUG SLEEP 3\r\n")
        time.sleep(0.5)
        for i, w in enumerate(writers):
            w.sendall(_xadd(f"{i + 2}-1", b"x" * 10_000))
        assert _recv_reply(sleeper) == b"+OK\r\n"
        wait_until(lambda: _write_status(r) == "err", what="the frame's write to fail")
        assert all(_pending_bytes(w) == b"" for w in writers)       # every one held
        for w in writers[:-1]:
            w.close()
        wait_until(lambda: r.info("clients")["connected_clients"] == 3,   # r, sleeper, the last
                   what="the server to see the hang-ups")
        disk.free()
        assert _recv_reply(writers[-1]) == b"$3\r\n5-1\r\n"
        assert r.ping()
        assert r.xadd("s", {"f": "after"}, id="6-1") == b"6-1"
        assert "Traceback" not in srv.log_text()
    finally:
        for w in writers + [sleeper]:
            w.close()
        srv.stop()


def test_a_replication_state_that_cannot_be_written_is_said_once(disk, tmp_path):
    """The primary's cron writes replication.state whenever the stream moved on.  On
    a full disk that write fails: said once (not every tick), retried with a growing
    delay, and said again when it works."""
    # (No node cache: its own snapshots on the full disk are not what this is about.)
    srv = _server(disk, tmp_path, "--appendfsync", "everysec", "--stream-cache-size", "0").start()
    state_file = disk.path / "replication.state"
    failed = f"Cannot write {state_file}"
    try:
        r = redis.Redis(port=srv.port, socket_timeout=15)
        r.xadd("s", {"f": "v"}, id="1-1")
        wait_until(state_file.exists, what="the state file")
        disk.fill()
        # A small write still fits in the AOF's last page; the state's new file does not.
        assert r.xadd("s", {"f": "v"}, id="2-1") == b"2-1"
        assert _write_status(r) == "ok"
        wait_until(lambda: failed in srv.log_text(), what="the state's write to fail")
        time.sleep(2)       # twenty ticks of the cron, each of which wants the state written
        assert srv.log_text().count(failed) == 1
        disk.free()
        wait_until(lambda: f"Writing {state_file} works again" in srv.log_text(),
                   what="the state written again")
        assert srv.log_text().count(failed) == 1
    finally:
        srv.stop()


def test_a_failed_everysec_fsync_refuses_writes_until_one_works(tmp_path):
    """A failing disk rather than a full one: fdatasync cannot be made to fail on a
    tmpfs, so the aof-fsync thread's next fsyncs are made to fail.  Writes get MISCONF,
    everything else is answered, and the refusal ends with the first fsync that works,
    though with writes refused none came to make the log dirty again."""
    srv = ServerProcess(tmp_path / "data", "--appendonly", "yes", "--appendfsync", "everysec",
                        "--save", "").start()
    try:
        r = redis.Redis(port=srv.port, socket_timeout=15)
        assert r.execute_command("DEBUG", "AOF-INJECT-FSYNC-ERROR", "3") == b"OK"
        assert r.xadd("s", {"f": "v"}, id="1-1") == b"1-1"       # everysec: acknowledged
        wait_until(lambda: _write_status(r) == "err", what="the failed fsync")
        with pytest.raises(redis.ResponseError,
                           match="MISCONF Errors writing to the AOF file: Input/output error"):
            r.xadd("s", {"f": "refused"}, id="2-1")
        assert r.ping() and r.xlen("s") == 1
        wait_until(lambda: _write_status(r) == "ok", what="an fsync that works")
        assert r.xadd("s", {"f": "v"}, id="3-1") == b"3-1"
        assert srv.log_text().count("Error fsyncing the AOF file: Input/output error") == 1
    finally:
        srv.stop()
