"""Pipelined ``XADD key * ...`` requests, mixed with other commands, from one
client and several.  Each scenario runs against StreamDB and a real redis-server
7.0 with the whole pipeline sent in one write, and the replies are compared
(entry ids masked: they hold the time).
"""

from __future__ import annotations

import re
import socket
import time

import pytest

from helpers import ServerProcess
from resp_raw import RawClient, encode, plain

ID = re.compile(rb"^\d+-\d+$")


def _pipeline(port: int, commands: list[tuple]) -> list:
    c = RawClient(port)
    try:
        c.sock.sendall(b"".join(encode(cmd) for cmd in commands))
        return [c._read() for _ in commands]
    finally:
        c.close()


def _mask_ids(replies: list) -> list:
    """Entry ids replaced by b"<id>" (they hold the time)."""
    def mask(v):
        t, x = v
        if isinstance(x, list):
            return (t, [mask(i) for i in x])
        if t == b"$" and x is not None and ID.match(x):
            return (t, b"<id>")
        return v
    return [mask(v) for v in replies]


def _noperm(replies: list) -> list:
    # The key-permission text is later Redis's on purpose (tests/security/test_acl.py).
    return [(b"-", b"NOPERM") if t == b"-" and x.startswith(b"NOPERM") else (t, x)
            for t, x in replies]


def _both(server, redis_server, commands: list[tuple]) -> list:
    ours = _noperm(_mask_ids(_pipeline(server.port, [("FLUSHALL",), *commands])))
    theirs = _noperm(_mask_ids(_pipeline(redis_server.port, [("FLUSHALL",), *commands])))
    assert ours == theirs
    return ours


def test_runs_interleaved_with_other_commands_and_errors(server, redis_server):
    add = ("XADD", "p", "*", "sensor", "1")
    replies = _both(server, redis_server, [
        add, add, add, ("XLEN", "p"),
        ("XADD", "p", "*", "a", "1", "b"),            # odd field count: XADD's own error
        add, ("XADD", "q", "*", "a", "1"), add,       # another key ends the run
        ("SET", "w", "x"), ("XADD", "w", "*", "a", "1"), ("XADD", "w", "*", "a", "1"),
        ("XADD", "p", "1-1", "a", "1"),                # an explicit id below the top
        ("xadd", "p", "*", "lower", "case"), ("XLEN", "p"),
        ("MULTI",), add, add, ("EXEC",), ("XLEN", "p"),
        ("XADD", "p", "NOMKSTREAM", "*", "a", "1"), ("XRANGE", "p", "-", "+", "COUNT", "2"),
    ])
    assert plain(replies[4]) == 3 and plain(replies[-3]) == 8


def test_a_blocked_reader_is_served_after_the_first_entry(server, redis_server):
    """One by one, the XADD that feeds a blocked XREAD serves it at once: the reader
    gets the first entry of the pipeline only, on Redis and here."""
    for srv in (server, redis_server):
        RawClient(srv.port).call("DEL", "b")
        reader = RawClient(srv.port)
        reader.sock.sendall(encode(("XREAD", "BLOCK", "0", "STREAMS", "b", "$")))
        admin = RawClient(srv.port)
        deadline = time.monotonic() + 5
        while b"blocked_clients:1" not in plain(admin.call("INFO", "clients")):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        replies = _pipeline(srv.port, [("XADD", "b", "*", "n", str(i)) for i in range(5)])
        assert all(ID.match(plain(r)) for r in replies)
        got = plain(reader._read())
        assert got == [[b"b", [[plain(replies[0]), [b"n", b"0"]]]]], srv
        reader.close()
        admin.close()


def test_a_user_limited_to_some_keys_gets_noperm_inside_a_run(server, redis_server):
    for srv in (server, redis_server):
        RawClient(srv.port).call("ACL", "SETUSER", "piper", "on", "nopass", "~ok*", "+@all")
    try:
        _both(server, redis_server, [
            ("AUTH", "piper", "x"),
            ("XADD", "ok1", "*", "a", "1"), ("XADD", "no1", "*", "a", "1"),
            ("XADD", "ok1", "*", "a", "1"), ("XADD", "ok1", "*", "a", "1"),
            ("XLEN", "ok1"),
        ])
    finally:
        for srv in (server, redis_server):
            RawClient(srv.port).call("ACL", "DELUSER", "piper")


def test_a_run_is_counted_and_logged_per_command(server):
    admin = RawClient(server.port)
    admin.call("CONFIG", "RESETSTAT")
    admin.call("CONFIG", "SET", "slowlog-log-slower-than", "0")
    admin.call("SLOWLOG", "RESET")
    try:
        _pipeline(server.port, [("XADD", "counted", "*", "n", str(i)) for i in range(50)])
        stats = plain(admin.call("INFO", "commandstats"))
        assert re.search(rb"cmdstat_xadd:calls=50,", stats)
        slow = plain(admin.call("SLOWLOG", "GET", "200"))
        xadds = [e for e in slow if e[3][0] == b"XADD"]
        assert len(xadds) == 50
        assert sorted(e[3][4] for e in xadds) == sorted(b"%d" % i for i in range(50))
    finally:
        admin.call("CONFIG", "SET", "slowlog-log-slower-than", "10000")
        admin.close()


def test_a_monitor_sees_every_command_of_a_run(server):
    monitor = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    monitor.sendall(encode(("MONITOR",)))
    assert monitor.recv(5) == b"+OK\r\n"
    try:
        _pipeline(server.port, [("XADD", "watched", "*", "n", str(i)) for i in range(5)])
        seen = b""
        deadline = time.monotonic() + 5
        while seen.count(b'"XADD"') < 5 and time.monotonic() < deadline:
            seen += monitor.recv(65536)
        assert [int(n) for n in re.findall(rb'"n" "(\d+)"', seen)] == list(range(5))
    finally:
        monitor.close()


@pytest.mark.parametrize("fsync", ["always", "no"])
def test_a_run_survives_kill_9(tmp_path, fsync):
    with ServerProcess(tmp_path / "d", "--appendonly", "yes", "--appendfsync", fsync,
                       "--save", "") as srv:
        replies = _pipeline(srv.port, [("XADD", "s", "*", "n", str(i)) for i in range(300)])
        assert all(ID.match(plain(r)) for r in replies)
        digest = plain(RawClient(srv.port).call("DEBUG", "DIGEST"))
        if fsync == "no":
            # Written, not necessarily synced: the page cache survives a process kill.
            time.sleep(0.2)
        srv.kill9()
        srv.start()
        c = RawClient(srv.port)
        assert plain(c.call("XLEN", "s")) == 300
        assert plain(c.call("DEBUG", "DIGEST")) == digest
        entries = plain(c.call("XRANGE", "s", "-", "+"))
        assert [e[0] for e in entries] == [plain(r) for r in replies]
        c.close()


def _same_turn(port: int, setup: list[tuple], per_client: list[list[tuple]],
               sleep: bool) -> list:
    """Each client's requests sent while the server sleeps (DEBUG SLEEP, which the
    Redis fixture does not enable: there it makes no difference), so that they are
    all read in one loop turn; returns each client's replies (ids masked)."""
    clients = [RawClient(port) for _ in per_client]
    for c, setup_cmds in zip(clients, setup):
        for cmd in setup_cmds:
            c.call(*cmd)
    sleeper = RawClient(port)
    if sleep:
        sleeper.sock.sendall(encode(("DEBUG", "SLEEP", "0.3")))
        time.sleep(0.05)
    for c, cmds in zip(clients, per_client):
        c.sock.sendall(b"".join(encode(cmd) for cmd in cmds))
    replies = [_mask_ids([c._read() for _ in cmds]) for c, cmds in zip(clients, per_client)]
    if sleep:
        assert plain(sleeper._read()) == b"OK"
    for c in [*clients, sleeper]:
        c.close()
    return replies


def test_clients_writing_in_the_same_turn(server, redis_server):
    """Pipelines of several clients on one key read in one loop turn; a client in
    MULTI, one whose user may not write the key and one on a key of another type
    still get what Redis gives them."""
    add = ("XADD", "t", "*", "from", "x")
    per_client = [
        [add, add, add],
        [add],
        [add],                                  # in MULTI: QUEUED
        [add, add],                             # a user without access to t
        [("XADD", "str", "*", "a", "1")] * 2,   # WRONGTYPE
        [add, ("XLEN", "t")],
    ]
    setup = [[], [], [("MULTI",)], [("AUTH", "writer", "x")], [], []]
    results = []
    for srv in (server, redis_server):
        c = RawClient(srv.port)
        c.call("FLUSHALL")
        c.call("SET", "str", "v")
        c.call("ACL", "SETUSER", "writer", "on", "nopass", "~other*", "+@all")
        c.close()
        try:
            results.append([_noperm(r) for r in _same_turn(srv.port, setup, per_client,
                                                            srv is server)])
            c = RawClient(srv.port)
            assert plain(c.call("XLEN", "t")) == 5
            ids = [e[0] for e in plain(c.call("XRANGE", "t", "-", "+"))]
            assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split(b"-"))))
            c.close()
        finally:
            c = RawClient(srv.port)
            c.call("ACL", "DELUSER", "writer")
            c.close()
    ours, theirs = results
    # The last client's XLEN depends on which clients the server read first: not compared.
    assert ours[:-1] == theirs[:-1]
    assert ours[-1][0] == theirs[-1][0] == (b"$", b"<id>")


def test_a_command_runs_when_it_is_read(server):
    """Every request runs as it is read, however the loop turn goes on: an XADD read
    before another client's XLEN in the same turn is counted by it (no XADD waits
    for the end of the turn)."""
    c = RawClient(server.port)
    c.call("DEL", "order")
    c.close()
    writer, reader, sleeper = RawClient(server.port), RawClient(server.port), RawClient(server.port)
    try:
        sleeper.sock.sendall(encode(("DEBUG", "SLEEP", "0.3")))
        time.sleep(0.05)
        writer.sock.sendall(encode(("XADD", "order", "*", "f", "v")))
        time.sleep(0.05)            # read first: its bytes arrived first
        reader.sock.sendall(encode(("XLEN", "order")))
        assert ID.match(plain(writer._read()))
        assert plain(reader._read()) == 1
        assert plain(sleeper._read()) == b"OK"
    finally:
        for x in (writer, reader, sleeper):
            x.close()


def test_a_capped_producer_pipeline(server, redis_server):
    """XADD key MAXLEN ~ n * ... pipelined (how producers cap a stream): what
    remains must be what Redis keeps."""
    cap = [("XADD", "capped", "MAXLEN", "~", "100", "*", "n", str(i)) for i in range(700)]
    replies = _both(server, redis_server, [
        *cap, ("XLEN", "capped"),
        ("XRANGE", "capped", "-", "+", "COUNT", "1"),
        ("XADD", "capped", "MAXLEN", "~", "-1", "*", "n", "bad"),     # XADD's own error
        ("XADD", "capped", "maxlen", "~", "100", "*", "n", "700"),
        ("XLEN", "capped"),
    ])
    assert plain(replies[701]) < 700


def _xinfo_idmp(c: RawClient, key: str) -> dict:
    info = plain(c.call("XINFO", "STREAM", key))
    fields = dict(zip(info[0::2], info[1::2]))
    return {k: fields[k] for k in (b"length", b"pids-tracked", b"iids-tracked",
                                   b"iids-added", b"iids-duplicates")}


def test_an_idmp_pipeline_answers_as_xadd_does_one_by_one(server):
    """``XADD key IDMP pid iid * ..`` pipelined (the Spark sink's exactly-once form)
    answers as one round trip at a time does.  Redis 7.0 has no IDMP, so the
    reference is StreamDB itself with the same requests sent one by one."""
    def requests(key):
        reqs = [("XADD", key, "IDMP", "p", str(i % 7), "*", "n", str(i)) for i in range(20)]
        reqs[5] = ("XADD", key, "IDMP", "", "1", "*", "n", "x")        # XADD's own error
        reqs[9] = ("XADD", key, "IDMP", "q", "1", "*", "n", "x", "y")  # odd field count
        return reqs
    c = RawClient(server.port)
    c.call("FLUSHALL")
    one_by_one = [c.call(*r) for r in requests("single")]
    piped = _pipeline(server.port, requests("piped"))
    assert _mask_ids(piped) == _mask_ids(one_by_one)
    # A repeated pid/iid (earlier in the same pipeline) answers the first one's id.
    ids = [plain(r) for r in piped]
    first_of, duplicates = {}, 0
    for k, r in enumerate(requests("piped")):
        if k in (5, 9):
            assert piped[k][0] == b"-"
            continue
        if r[4] in first_of:
            assert ids[k] == ids[first_of[r[4]]]
            duplicates += 1
        else:
            first_of[r[4]] = k
    assert duplicates == 11
    assert len(set(ids) - {piped[5][1], piped[9][1]}) == 7
    assert _xinfo_idmp(c, "piped") == _xinfo_idmp(c, "single")
    assert _xinfo_idmp(c, "piped")[b"iids-duplicates"] == duplicates
    c.close()


def test_an_idmp_run_survives_kill_9(tmp_path):
    """The run's XADD + XIDMPRECORD effects reach the AOF: after kill -9 the same
    pipeline is answered entirely as duplicates, with the original ids."""
    # A producer id per 100 iids (stream-idmp-maxsize), as the Spark sink does it.
    pipeline = [("XADD", "s", "IDMP", f"job-1:{i // 100}", str(i), "*", "n", str(i))
                for i in range(300)]
    with ServerProcess(tmp_path / "d", "--appendonly", "yes", "--appendfsync", "always",
                       "--save", "") as srv:
        first = [plain(r) for r in _pipeline(srv.port, pipeline)]
        assert all(ID.match(i) for i in first) and len(set(first)) == 300
        srv.kill9()
        srv.start()
        again = [plain(r) for r in _pipeline(srv.port, pipeline)]
        assert again == first
        c = RawClient(srv.port)
        assert plain(c.call("XLEN", "s")) == 300
        assert _xinfo_idmp(c, "s")[b"iids-duplicates"] == 300
        c.close()
