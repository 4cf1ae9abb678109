"""Protected mode: with no password on the default user, only loopback clients get in.

The decision is unit-tested; the real test binds a server to 0.0.0.0 and
connects through this machine's own non-loopback address (skipped when it has
none), next to a real redis-server doing the same.
"""

from __future__ import annotations

import socket
import subprocess
import time

import pytest
import redis

from helpers import RedisProcess, ServerProcess
from streamdb.security.protected import DENIED, is_loopback, refuses


def test_decision():
    assert not refuses(True, True, "127.0.0.1")
    assert not refuses(True, True, "127.8.9.10")
    assert not refuses(True, True, "::1")
    assert not refuses(True, True, "::ffff:127.0.0.1")
    assert not refuses(True, True, None)                  # a Unix socket
    assert not refuses(True, True, "/tmp/streamdb.sock")
    assert refuses(True, True, "192.0.2.2")
    assert refuses(True, True, "fd00::2")
    assert refuses(True, True, "::ffff:10.1.2.3")
    assert not refuses(False, True, "192.0.2.2")          # protected-mode no
    assert not refuses(True, False, "192.0.2.2")          # the default user has a password
    assert is_loopback("fe80::1%lo") is False


def _local_address() -> str | None:
    """An IPv4 address of this machine that is not loopback, if it has one."""
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for addr in out.split():
        if ":" not in addr and not addr.startswith("127."):
            return addr
    return None


def _first_reply(host: str, port: int) -> bytes:
    """Connect from ``host``: what a refusing server sends at once and its close, else
    the reply to a PING."""
    with socket.create_connection((host, port), timeout=5) as s:
        # A refusal is written on accept; a PING sent into a socket the server is
        # closing could turn the close into a reset that loses the text.
        s.settimeout(0.5)
        try:
            data = s.recv(65536)
        except socket.timeout:
            data = b""
        s.settimeout(5)
        if data:
            while chunk := s.recv(65536):
                data += chunk
            return data + b"<closed>"
        s.sendall(b"PING\r\n")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                return data + b"<closed>"
            data += chunk
            if data.endswith(b"\r\n") and not data.startswith(b"-DENIED"):
                return data
        return data


LOCAL = _local_address()


@pytest.mark.skipif(LOCAL is None, reason="no non-loopback address on this machine")
@pytest.mark.skipif(not RedisProcess.available(), reason="needs redis-server")
def test_non_loopback_client_is_denied_like_redis(tmp_path):
    with ServerProcess(tmp_path / "s", "--bind", "0.0.0.0", "--save", "",
                       "--appendonly", "no") as ours, \
            RedisProcess(tmp_path / "r", "--bind", "0.0.0.0") as theirs:
        denied = _first_reply(LOCAL, ours.port)
        assert denied == DENIED + b"<closed>"
        assert _first_reply(LOCAL, theirs.port) == denied
        assert _first_reply("127.0.0.1", ours.port) == b"+PONG\r\n"
        r = redis.Redis(port=ours.port)
        assert r.info("stats")["rejected_connections"] == 1
        # A password on the default user lifts it (then AUTH is needed, as usual).
        r.config_set("requirepass", "s3cret")
        assert _first_reply(LOCAL, ours.port) == b"-NOAUTH Authentication required.\r\n"
        r = redis.Redis(port=ours.port, password="s3cret")
        r.config_set("requirepass", "")
        assert _first_reply(LOCAL, ours.port) == DENIED + b"<closed>"
        # And so does protected-mode no.
        r = redis.Redis(port=ours.port)
        r.config_set("protected-mode", "no")
        assert _first_reply(LOCAL, ours.port) == b"+PONG\r\n"
