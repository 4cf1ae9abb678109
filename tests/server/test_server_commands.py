"""Generic, string and server commands against a real StreamDB and a real redis-server 7.0.

``same(...)`` sends one command to both and asserts identical replies (errors
included): that is the compatibility contract for everything Redis 7.0 has.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis


@pytest.fixture
def pair(server, redis_server):
    a = redis.Redis(port=server.port, protocol=2)
    b = redis.Redis(port=redis_server.port, protocol=2)
    a.flushall()
    b.flushall()
    yield a, b
    a.close()
    b.close()


def _call(client, *args):
    try:
        return ("ok", client.execute_command(*args))
    except (redis.ResponseError, redis.AuthenticationError) as e:
        return ("err", type(e).__name__, str(e))


def same(pair, *args):
    a, b = pair
    ours, theirs = _call(a, *args), _call(b, *args)
    assert ours == theirs, f"{args}: streamdb={ours!r} redis={theirs!r}"
    return ours


@pytest.mark.parametrize("cmd", [
    ("PING",), ("PING", "hi"), ("PING", "a", "b"), ("ECHO", "x"), ("ECHO",),
    ("SELECT", "1"), ("SELECT", "16"), ("SELECT", "x"), ("SELECT", "-1"),
    ("NOSUCHCOMMAND", "a", "b"), ("GET",), ("TYPE", "missing"), ("EXISTS", "a", "b"),
    ("DEL", "a"), ("DBSIZE",), ("INCR", "n"), ("INCRBY", "n", "x"), ("DECRBY", "n", "5"),
    ("SET", "k", "v", "NX", "XX"), ("SET", "k", "v", "EX", "0"), ("SET", "k", "v", "EX", "x"),
    ("SET", "k", "v", "GET"), ("MGET", "k", "n", "none"), ("TTL", "k"), ("PTTL", "missing"),
    ("EXPIRE", "k", "x"), ("EXPIRE", "k", "100", "NX", "XX"), ("EXPIRE", "k", "100", "GT", "LT"),
    ("EXPIRE", "missing", "100"), ("PERSIST", "k"), ("RENAME", "missing", "x"),
    ("XLEN", "missing"), ("XRANGE", "missing", "-", "+"), ("XADD", "k", "*", "a", "1"),
    ("FLUSHDB", "bogus"), ("CLIENT", "NOPE"), ("CONFIG", "NOPE"), ("CONFIG", "GET"),
    ("AUTH", "x"), ("AUTH", "a", "b"), ("HELLO", "4"), ("HELLO", "x"), ("MULTI", "x"),
    ("EXEC",), ("DISCARD",), ("WATCH",), ("UNWATCH",), ("TIME", "x"),
    ("CLIENT", "SETNAME", "has space"), ("CLIENT", "UNBLOCK", "999999"),
    ("CLIENT", "UNBLOCK", "x"), ("CLIENT", "UNBLOCK", "1", "maybe"),
    ("SCAN", "x"), ("SCAN", "0", "COUNT", "0"), ("KEYS",), ("COPY", "a", "a"),
])
def test_reply_and_error_match_redis(pair, cmd):
    a, b = pair
    for c in (a, b):
        c.set("k", "v")
        c.set("n", "5")
    same(pair, *cmd)


def test_wrongtype_between_strings_and_streams(pair):
    same(pair, "XADD", "s", "1-1", "a", "1")
    same(pair, "GET", "s")
    same(pair, "INCR", "s")
    same(pair, "SET", "str", "x")
    for cmd in (("XADD", "str", "*", "a", "1"), ("XLEN", "str"), ("XRANGE", "str", "-", "+"),
                ("XREAD", "STREAMS", "str", "0"), ("XTRIM", "str", "MAXLEN", "0"),
                ("XDEL", "str", "1-1"), ("TYPE", "str"), ("TYPE", "s")):
        same(pair, *cmd)


def test_multi_exec_watch(pair):
    a, b = pair
    for c in (a, b):
        c.execute_command("WATCH", "w")
        c.set("w", "changed")
        c.execute_command("MULTI")
        c.execute_command("SET", "x", "1")
        assert c.execute_command("EXEC") is None     # WATCH fired
        c.execute_command("MULTI")
        with pytest.raises(redis.ResponseError):
            c.execute_command("NOSUCH")
        with pytest.raises(redis.ResponseError) as e:
            c.execute_command("EXEC")
        assert str(e.value).startswith("Transaction discarded") or "EXECABORT" in str(e.value)


def test_exec_runs_queued_commands_and_reports_errors_inline(r):
    p = r.pipeline(transaction=True)
    p.xadd("s", {"a": 1}, id="1-1")
    p.xadd("s", {"a": 1}, id="1-1")   # error at run time, the rest still runs
    p.xlen("s")
    out = p.execute(raise_on_error=False)
    assert out[0] == b"1-1"
    assert isinstance(out[1], redis.ResponseError)
    assert out[2] == 1


def test_watch_on_stream_fires_on_xadd(server):
    a = redis.Redis(port=server.port)
    b = redis.Redis(port=server.port)
    a.flushall()
    a.xadd("ws", {"a": 1})
    a.execute_command("WATCH", "ws")
    b.xadd("ws", {"a": 2})
    a.execute_command("MULTI")
    a.execute_command("XLEN", "ws")
    assert a.execute_command("EXEC") is None


def test_expiry_on_streams_lazy_and_active(r):
    r.xadd("ttl-s", {"a": 1})
    assert r.pexpire("ttl-s", 50)
    assert 0 < r.pttl("ttl-s") <= 50
    time.sleep(0.08)
    assert r.xlen("ttl-s") == 0            # lazily gone
    assert r.exists("ttl-s") == 0
    r.xadd("ttl-a", {"a": 1})
    r.pexpire("ttl-a", 30)
    deadline = time.time() + 3
    while time.time() < deadline and r.dbsize():
        time.sleep(0.05)                     # active expiry removes it without access
    assert r.dbsize() == 0


def test_scan_match_count_type(r):
    for i in range(30):
        r.xadd(f"stream:{i}", {"a": 1})
        r.set(f"string:{i}", "x")
    cursor, seen = 0, set()
    while True:
        cursor, keys = r.scan(cursor, match="stream:*", count=7, _type="stream")
        seen.update(keys)
        if cursor == 0:
            break
    assert seen == {f"stream:{i}".encode() for i in range(30)}
    assert sorted(r.keys("string:1?")) == sorted(f"string:1{i}".encode() for i in range(10))


def test_rename_and_copy_streams_keep_groups(r):
    r.xadd("src", {"a": 1}, id="1-1")
    r.execute_command("XSETID", "src", "5-0")
    assert r.copy("src", "dst")
    assert r.xrange("dst") == [(b"1-1", {b"a": b"1"})]
    r.xadd("dst", {"b": 2}, id="6-0")
    assert r.xlen("src") == 1                # a real copy, not an alias
    assert r.rename("src", "moved")
    assert r.exists("src") == 0 and r.xlen("moved") == 1


def test_select_databases_are_separate(server):
    c = redis.Redis(port=server.port, db=3)
    c.flushall()
    c.xadd("s", {"a": 1})
    assert redis.Redis(port=server.port, db=0).exists("s") == 0
    assert c.dbsize() == 1
    assert c.info("keyspace")["db3"]["keys"] == 1


def test_client_commands(server):
    a = redis.Redis(port=server.port)
    a.client_setname("alpha")
    assert a.client_getname() in ("alpha", b"alpha")
    cid = a.client_id()
    lst = a.execute_command("CLIENT", "LIST")
    assert f"id={cid}".encode() in lst and b"name=alpha" in lst
    info = a.execute_command("CLIENT", "INFO")
    assert f"id={cid} ".encode() in info
    b = redis.Redis(port=server.port)
    b.client_setname("victim")
    assert b.ping()
    assert a.execute_command("CLIENT", "KILL", "ID", b.client_id()) == 1
    assert b"name=victim" not in a.execute_command("CLIENT", "LIST")


def test_a_client_that_kills_itself_gets_its_reply_and_nothing_after_it(server, redis_server):
    """CLIENT KILL of the client itself in a pipeline: Redis answers it, closes the
    connection and runs none of the requests behind it (CLIENT_CLOSE_AFTER_REPLY)."""
    import socket
    for port in (server.port, redis_server.port):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"CLIENT ID\r\n")
            cid = int(s.recv(100)[1:-2])
            s.sendall(b"CLIENT KILL ID %d SKIPME no\r\nPING\r\n" % cid)
            received = b""
            while chunk := s.recv(100):
                received += chunk
            assert received == b":1\r\n", port


def test_client_unblock_timeout_and_error(server):
    import socket
    a = redis.Redis(port=server.port)
    for mode, expected in ((b"TIMEOUT", b"*-1\r\n"),
                           (b"ERROR", b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n")):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
            s.sendall(b"CLIENT ID\r\n")
            cid = int(s.recv(100)[1:-2])
            s.sendall(b"XREAD BLOCK 0 STREAMS unblock-me $\r\n")
            deadline = time.time() + 5
            while time.time() < deadline and a.execute_command("CLIENT", "UNBLOCK", cid, mode) == 0:
                time.sleep(0.01)
            assert s.recv(100) == expected


def test_client_setinfo_is_accepted_as_in_redis_7_2(r):
    # CLIENT SETINFO arrived in Redis 7.2 (redis-py sends it on connect); 7.0 lacks it.
    assert r.execute_command("CLIENT", "SETINFO", "lib-name", "mylib")
    with pytest.raises(redis.ResponseError, match="lib-name cannot contain spaces"):
        r.execute_command("CLIENT", "SETINFO", "lib-name", "a b")
    with pytest.raises(redis.ResponseError, match="Unrecognized option 'nope'"):
        r.execute_command("CLIENT", "SETINFO", "nope", "x")


def _raw(port: int, *args: str) -> bytes:
    from helpers import raw_exchange
    payload = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in args)
    return raw_exchange(port, payload)


def test_info_has_redis_sections_and_fields(r):
    r.xadd("s", {"a": 1})
    with pytest.raises(redis.ResponseError):
        r.execute_command("XADD", "s", "0-0", "a", "1")
    port = r.connection_pool.connection_kwargs["port"]
    text = _raw(port, "INFO", "everything").decode()
    for field in ("redis_version:", "connected_clients:", "blocked_clients:", "total_blocking_keys:",
                  "used_memory:", "total_error_replies:", "cmdstat_xadd:calls=", "errorstat_ERR:count=",
                  "db0:keys=1", "# CPU", "# Keyspace", "uptime_in_seconds:"):
        assert field in text, field


def test_config_get_set_glob_and_resetstat(r):
    got = r.config_get("stream-node-*")
    assert got == {"stream-node-max-entries": "100", "stream-node-max-bytes": "4096"}
    assert r.config_set("stream-node-max-entries", 50)
    assert r.config_get("stream-node-max-entries") == {"stream-node-max-entries": "50"}
    r.config_set("stream-node-max-entries", 100)
    with pytest.raises(redis.ResponseError):
        r.config_set("stream-node-max-entries", "lots")
    assert len(r.config_get("*")) > 30
    r.ping()
    assert r.config_resetstat()
    assert "cmdstat_ping" not in r.info("commandstats")


def test_command_count_info_docs_list(r):
    port = r.connection_pool.connection_kwargs["port"]
    n = int(_raw(port, "COMMAND", "COUNT")[1:-2])
    assert n > 40
    names = _raw(port, "COMMAND", "LIST")
    # COUNT counts commands; LIST names their subcommands too, as in Redis.
    listed = int(names[1:names.index(b"\r\n")])
    assert listed == n + names.count(b"|")
    assert b"$4\r\nxadd\r\n" in names and b"$13\r\nxgroup|create\r\n" in names
    assert _raw(port, "COMMAND", "INFO", "xadd").startswith(b"*1\r\n*10\r\n$4\r\nxadd\r\n:-5\r\n")
    assert b"summary" in _raw(port, "COMMAND", "DOCS", "xadd")


def test_debug_digest_changes_with_state(r):
    empty = r.execute_command("DEBUG", "DIGEST")
    assert empty == b"0" * 40
    r.xadd("s", {"a": 1}, id="1-1")
    d1 = r.execute_command("DEBUG", "DIGEST")
    r.xadd("s", {"a": 1}, id="1-2")
    assert r.execute_command("DEBUG", "DIGEST") not in (d1, empty)


def test_redis_cli_talks_to_streamdb(server):
    import shutil
    import subprocess
    if not shutil.which("redis-cli"):
        pytest.skip("redis-cli not installed")
    out = subprocess.run(["redis-cli", "-p", str(server.port), "XADD", "cli", "1-1", "a", "b"],
                         capture_output=True, text=True, timeout=10).stdout
    assert out.strip() == "1-1"
    out = subprocess.run(["redis-cli", "-p", str(server.port), "XRANGE", "cli", "-", "+"],
                         capture_output=True, text=True, timeout=10).stdout
    assert out.split() == ["1-1", "a", "b"]


def test_debug_set_active_expire_0_stops_the_active_expiry(r):
    # Redis's own tests use it to watch expired keys that nobody touches: DBSIZE counts
    # them until the cron deletes them, which it must not while active expiry is off.
    r.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "0")
    try:
        expired_before = r.info("stats")["expired_keys"]
        r.set("short", "v", px=20)
        time.sleep(0.5)                 # many cron ticks (hz 10) after the expiry time
        assert r.dbsize() == 1
        assert r.info("stats")["expired_keys"] == expired_before
    finally:
        r.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "1")
    deadline = time.monotonic() + 5
    while r.dbsize() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.dbsize() == 0
