"""Start real servers on loopback for tests: StreamDB and, for differential tests, redis-server."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from streamdb.persistence.aof import SEGMENT_MAGIC, frame_size, read_segment
from streamdb.cli.procs import free_port, wait_until_ready

ROOT = Path(__file__).resolve().parent.parent


# One implementation for tests and tools; the names tests use are kept.
wait_for_port = wait_until_ready


def wait_until(fn, timeout: float = 15.0, what: str = "condition"):
    """Polls ``fn`` until it returns something true (returned), or fails the test."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def terminate(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """SIGTERM ``proc`` if it still runs and reap it; SIGKILL past ``timeout`` seconds."""
    if proc and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class ServerProcess:
    """A StreamDB server process: ``with ServerProcess(tmp_path) as srv: srv.port``."""

    def __init__(self, data_dir: Path, *args: str, port: int | None = None,
                 config: str | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.args = list(args)
        self.config = config
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir / f"streamdb-{self.port}.log"

    def start(self) -> "ServerProcess":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "streamdb"]
        if self.config:
            cmd.append(self.config)
        cmd += ["--port", str(self.port), "--dir", str(self.data_dir), *self.args]
        # STREAMDB_TEST_STREAM_CACHE=64kb runs every server a test starts with that
        # node cache, so that its command paths meet cold stream nodes.
        cache = os.environ.get("STREAMDB_TEST_STREAM_CACHE")
        if cache and "--stream-cache-size" not in self.args:
            cmd += ["--stream-cache-size", cache]
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)
        wait_for_port(self.port, self.proc)
        return self

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        terminate(self.proc)
        if getattr(self, "_log", None):
            self._log.close()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class RedisProcess:
    """A real redis-server (Debian's 7.0) without persistence, for differential tests."""

    def __init__(self, data_dir: Path, *args: str) -> None:
        self.data_dir = Path(data_dir)
        self.port = free_port()
        self.args = list(args)
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def start(self) -> "RedisProcess":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", str(self.data_dir), "--daemonize", "no",
               "--logfile", str(self.data_dir / "redis.log"), *self.args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.proc)
        return self

    def stop(self) -> None:
        terminate(self.proc)

    def __enter__(self) -> "RedisProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def raw_exchange(port: int, payload: bytes, timeout: float = 2.0, expect_close: bool = False) -> bytes:
    """Send raw bytes, return everything received until the reply stops (or the peer closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        chunks = []
        s.settimeout(0.3 if not expect_close else timeout)
        while True:
            try:
                data = s.recv(65536)
            except socket.timeout:
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)


def aof_frames(seg: Path) -> list[tuple[int, bytes]]:
    """(offset, body) of every frame of a valid segment."""
    out, pos = [], len(SEGMENT_MAGIC)
    for body in read_segment(seg.read_bytes()).frames:
        out.append((pos, body))
        pos += frame_size(body)
    return out


def corrupt_aof_frame(seg: Path, frame_index: int) -> int:
    """Flip a byte inside one frame's body; returns the frame's offset."""
    offset, body = aof_frames(seg)[frame_index]
    data = bytearray(seg.read_bytes())
    data[offset + frame_size(body) - len(body) // 2] ^= 0x20       # the middle of the body
    seg.write_bytes(bytes(data))
    return offset


def raw_reply(client, *args):
    """One command's reply as the server sent it, through a redis-py client but
    without the response callback that would reshape it."""
    conn = client.connection_pool.get_connection()
    try:
        conn.send_command(*args)
        return conn.read_response()
    finally:
        client.connection_pool.release(conn)
