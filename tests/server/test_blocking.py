"""Blocking XREAD: FIFO fairness, BLOCK 0, many keys, timeouts, disconnects, MULTI."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import redis


def _wait_blocked(r, n: int, timeout: float = 5.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if r.info("clients")["blocked_clients"] == n:
            return
        time.sleep(0.01)
    raise AssertionError(f"expected {n} blocked clients, have {r.info('clients')['blocked_clients']}")


def _raw_client(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def test_block_0_waits_until_an_xadd_arrives(r, server):
    s = _raw_client(server.port)
    s.sendall(b"XREAD BLOCK 0 STREAMS b0 $\r\n")
    _wait_blocked(r, 1)
    r.xadd("b0", {"f": "v"}, id="7-1")
    assert s.recv(1000) == b"*1\r\n*2\r\n$2\r\nb0\r\n*1\r\n*2\r\n$3\r\n7-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
    s.close()


def test_timeout_replies_null_array_after_the_timeout(server):
    s = _raw_client(server.port)
    t0 = time.monotonic()
    s.sendall(b"XREAD BLOCK 150 STREAMS nothing-here $\r\n")
    assert s.recv(100) == b"*-1\r\n"
    elapsed = time.monotonic() - t0
    assert 0.14 <= elapsed < 2.0
    s.sendall(b"HELLO 3\r\n")
    s.recv(1000)
    s.sendall(b"XREAD BLOCK 20 STREAMS nothing-here $\r\n")
    assert s.recv(100) == b"_\r\n"
    s.close()


def test_fifo_order_among_blocked_clients(r, server):
    """Every blocked XREAD reader gets the entry; they are served in the order they blocked."""
    socks = []
    for i in range(3):
        s = _raw_client(server.port)
        s.sendall(b"CLIENT SETNAME reader%d\r\n" % i)
        assert s.recv(100) == b"+OK\r\n"
        s.sendall(b"XREAD BLOCK 0 STREAMS fifo $\r\n")
        _wait_blocked(r, i + 1)
        socks.append(s)
    r.xadd("fifo", {"n": 1}, id="1-1")
    for s in socks:
        assert b"1-1" in s.recv(1000)
        s.close()


def test_many_keys_wakes_on_any_of_them(r, server):
    s = _raw_client(server.port)
    s.sendall(b"XREAD BLOCK 0 STREAMS k1 k2 k3 $ $ $\r\n")
    _wait_blocked(r, 1)
    r.xadd("k2", {"a": 1}, id="3-3")
    reply = s.recv(1000)
    assert b"$2\r\nk2\r\n" in reply and b"k1" not in reply
    s.close()


def test_pipelined_requests_wait_behind_a_blocked_one(r, server):
    s = _raw_client(server.port)
    s.sendall(b"XREAD BLOCK 0 STREAMS pipe $\r\nPING\r\n")
    _wait_blocked(r, 1)
    r.xadd("pipe", {"a": 1}, id="1-1")
    data = b""
    deadline = time.time() + 5
    while not data.endswith(b"+PONG\r\n") and time.time() < deadline:
        data += s.recv(1000)
    assert data.index(b"1-1") < data.index(b"+PONG")
    s.close()


def test_disconnect_while_blocked_leaves_nothing_behind(r, server):
    s = _raw_client(server.port)
    s.sendall(b"XREAD BLOCK 0 STREAMS gone1 gone2 $ $\r\n")
    _wait_blocked(r, 1)
    assert r.info("clients")["total_blocking_keys"] == 2
    s.close()
    _wait_blocked(r, 0)
    assert r.info("clients")["total_blocking_keys"] == 0
    r.xadd("gone1", {"a": 1})        # nobody to serve; must not fail
    assert r.ping()


def test_xread_block_inside_multi_does_not_block(r):
    p = r.pipeline(transaction=True)
    p.xread({"multi-block": "$"}, block=0)
    assert p.execute() in ([[]], [None])      # a null array: treated as a timeout


def test_xread_plus_returns_last_entry_newer_than_7_0(r):
    # XREAD ... + (last entry) arrived in Redis 7.4; 7.0 rejects '+' as an invalid id.
    r.xadd("plus", {"a": 1}, id="1-1")
    r.xadd("plus", {"a": 2}, id="2-1")
    assert r.xread({"plus": "+"}) == [[b"plus", [(b"2-1", {b"a": b"2"})]]]


def test_blocked_reader_sees_entries_added_in_a_transaction(r, server):
    s = _raw_client(server.port)
    s.sendall(b"XREAD BLOCK 0 STREAMS tx $\r\n")
    _wait_blocked(r, 1)
    p = r.pipeline(transaction=True)
    p.xadd("tx", {"a": 1}, id="1-1")
    p.xadd("tx", {"a": 2}, id="1-2")
    p.execute()
    reply = s.recv(1000)
    assert b"1-1" in reply and b"1-2" in reply   # served after EXEC, sees both
    s.close()
