"""Starting servers on loopback for tools and tests: a free port, and waiting until ready."""

from __future__ import annotations

import socket
import subprocess
import time

__all__ = ["free_port", "wait_until_ready"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_ready(port: int, proc: subprocess.Popen | None = None, timeout: float = 15.0,
                     poll: float = 0.05) -> None:
    """Until PING on ``port`` answers +PONG (a server still loading answers -LOADING).

    ``poll``: seconds between tries (benchmarks timing a start-up use a small one).

    Raises RuntimeError if ``proc`` exits first, TimeoutError after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(poll)
    raise TimeoutError(f"server on port {port} did not answer PING")
