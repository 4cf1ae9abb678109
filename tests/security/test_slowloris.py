"""Slowloris: many clients dribbling partial commands must not starve a normal client.

Liveness checks with generous bounds, not timing benchmarks: the event loop
only ever sees a few bytes from each slow client, so a normal client's
requests are served between them; and a client that keeps sending without
ever completing a command is cut off at ``client-query-buffer-limit``.
"""

from __future__ import annotations

import socket
import time

import pytest
import redis

from helpers import ServerProcess
from streamdb.protocol.request import encode_request as resp

SLOW_CLIENTS = 200
ROUNDS = 4
QUERY_BUFFER_LIMIT = 1024 * 1024


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS line")


@pytest.fixture
def srv(tmp_path):
    with ServerProcess(tmp_path, "--appendonly", "no", "--save", "",
                       "--client-query-buffer-limit", str(QUERY_BUFFER_LIMIT)) as s:
        yield s


def test_slow_clients_do_not_block_a_normal_client(srv):
    normal = redis.Redis(port=srv.port, socket_timeout=5)
    normal.ping()
    rss_before = rss_kb(srv.proc.pid)
    requests = [resp(b"XADD", b"slow:%d" % i, b"*", b"n", b"%d" % i) for i in range(SLOW_CLIENTS)]
    slow = [socket.create_connection(("127.0.0.1", srv.port), timeout=5) for _ in range(SLOW_CLIENTS)]
    try:
        for rnd in range(ROUNDS):
            round_start = time.monotonic()
            for sock, request in zip(slow, requests):
                sock.sendall(request[rnd:rnd + 1])     # one byte per client per second
            t0 = time.monotonic()
            for i in range(20):
                assert normal.ping() is True
                normal.xadd("normal", {"round": rnd, "i": i})
            served_in = time.monotonic() - t0
            assert served_in < 2.0, f"40 requests took {served_in:.2f}s with {SLOW_CLIENTS} slow clients"
            time.sleep(max(0.0, 1.0 - (time.monotonic() - round_start)))
        # Every slow client is still connected, with only its few bytes buffered.
        slow_rows = [c for c in normal.client_list() if c["id"] != str(normal.client_id())]
        assert len(slow_rows) == SLOW_CLIENTS
        assert all(int(c["qbuf"]) <= ROUNDS for c in slow_rows)
        # The dribbled prefixes were kept exactly: completing them runs each command.
        for sock, request in zip(slow, requests):
            sock.sendall(request[ROUNDS:])
        for sock in slow:
            assert sock.recv(100).startswith(b"$")      # a bulk reply: the new entry's id
        assert all(normal.xlen(f"slow:{i}") == 1 for i in range(SLOW_CLIENTS))
        assert normal.xlen("normal") == 20 * ROUNDS
        # 200 idle connections cost the server little memory (generous bound).
        assert rss_kb(srv.proc.pid) - rss_before < 50 * 1024
    finally:
        for sock in slow:
            sock.close()
        normal.close()


def test_a_client_that_never_finishes_a_command_is_cut_off_at_the_limit(srv):
    """A declared 100 MB bulk sent slowly in pieces: closed once 1 MB is buffered."""
    normal = redis.Redis(port=srv.port, socket_timeout=5)
    rss_before = rss_kb(srv.proc.pid)
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    sock.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000000\r\n")
    chunk = b"x" * 64 * 1024
    sent = 0
    closed = False
    try:
        while sent < 4 * QUERY_BUFFER_LIMIT:
            sock.sendall(chunk)
            sent += len(chunk)
            assert normal.ping() is True    # the normal client is served in between
    except (BrokenPipeError, ConnectionResetError):
        closed = True
    if not closed:
        sock.settimeout(5)
        try:
            closed = sock.recv(10) == b""
        except ConnectionResetError:
            closed = True
    sock.close()
    assert closed, "the server kept buffering past client-query-buffer-limit"
    assert "max query buffer" in srv.log_text()
    assert normal.exists("k") == 0
    assert rss_kb(srv.proc.pid) - rss_before < 64 * 1024
    normal.close()
