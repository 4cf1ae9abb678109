"""Replication with real processes on loopback: full sync, live stream, partial resync,
backlog overflow, READONLY, blocked readers on the replica, WAIT, promotion."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
import redis

from helpers import ROOT, ServerProcess, wait_until

READONLY = "READONLY You can't write against a read only replica."


def client(srv) -> redis.Redis:
    return redis.Redis(port=srv.port, decode_responses=False, socket_timeout=10)


def info(r, section="replication") -> dict:
    return r.info(section)


def link_up(r) -> bool:
    return info(r).get("master_link_status") == "up"


def wait_synced(p, rep, timeout: float = 10.0) -> bytes:
    """Replica caught up with the primary's offset and both digests are equal."""
    def same():
        off = info(p)["master_repl_offset"]
        if info(rep).get("slave_repl_offset", -1) < off:
            return False
        d1, d2 = p.execute_command("DEBUG", "DIGEST"), rep.execute_command("DEBUG", "DIGEST")
        return d1 if d1 == d2 else False
    return wait_until(same, timeout, "replica to catch up with equal digests")


def replica_of(path, primary, *args) -> ServerProcess:
    return ServerProcess(path, "--save", "", "--replicaof", "127.0.0.1", str(primary.port), *args)


def populate(r: redis.Redis) -> None:
    """A dataset with consumer groups, PELs, several dbs, a TTL."""
    for i in range(300):
        r.xadd("orders", {"n": i, "payload": "x" * (i % 17)})
    r.xgroup_create("orders", "billing", id="0")
    r.xgroup_create("orders", "audit", id="$")
    r.xreadgroup("billing", "alice", {"orders": ">"}, count=50)
    r.xreadgroup("billing", "bob", {"orders": ">"}, count=20)
    ids = [e[0] for e in r.xrange("orders", count=10)]
    r.xack("orders", "billing", *ids[:5])
    r.xclaim("orders", "billing", "carol", 0, ids[5:8])
    r.xdel("orders", ids[9])
    r.xadd("small", {"a": "1"}, id="5-1")
    r.set("plain", "v")
    r.expire("plain", 1000)
    r.execute_command("SELECT", 2)
    r.xadd("elsewhere", {"k": "v"})
    r.execute_command("SELECT", 0)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("repl")
    with ServerProcess(d / "p", "--save", "") as p:
        rp = redis.Redis(port=p.port)
        populate(rp)
        with replica_of(d / "r", p) as r:
            yield p, r


def test_full_sync_of_groups_and_live_stream(pair):
    p, r = pair
    rp, rr = client(p), client(r)
    wait_until(lambda: link_up(rr), what="link up")
    wait_synced(rp, rr)
    assert info(rp)["connected_slaves"] == 1
    assert rr.xinfo_groups("orders") == rp.xinfo_groups("orders")
    assert rr.xpending("orders", "billing") == rp.xpending("orders", "billing")
    # Live stream: every kind of group-state change, transactions, trims, other dbs.
    for i in range(50):
        rp.xadd("orders", {"live": i})
    rp.xreadgroup("billing", "alice", {"orders": ">"}, count=30)
    rp.xreadgroup("audit", "dan", {"orders": ">"}, count=5, noack=True)
    pend = rp.xpending_range("orders", "billing", "-", "+", 10)
    rp.xack("orders", "billing", pend[0]["message_id"])
    rp.xclaim("orders", "billing", "erin", 0, [pend[1]["message_id"]])
    rp.xautoclaim("orders", "billing", "frank", 0, "0-0", count=3)
    rp.xtrim("orders", maxlen=200, approximate=True)
    rp.xtrim("orders", maxlen=250)
    rp.xgroup_setid("orders", "audit", "0")
    with rp.pipeline(transaction=True) as tx:
        tx.xadd("orders", {"tx": 1})
        tx.xadd("tx2", {"tx": 2})
        tx.execute_command("SELECT", 3)
        tx.xadd("db3stream", {"tx": 3})
        tx.execute()
    rp.delete("small")
    rp.execute_command("SELECT", 5)
    rp.xadd("db5", {"a": 1})
    rp.execute_command("SELECT", 0)
    wait_synced(rp, rr)
    assert rr.xinfo_groups("orders") == rp.xinfo_groups("orders")
    assert rr.xinfo_consumers("orders", "billing") != []
    assert rr.xlen("orders") == rp.xlen("orders")


def test_replica_rejects_writes_with_readonly(pair):
    p, r = pair
    rr = client(r)
    with pytest.raises(redis.ReadOnlyError) as e:
        rr.xadd("orders", {"no": 1})
    assert str(e.value) == READONLY.split(" ", 1)[1]
    raw = socket.create_connection(("127.0.0.1", r.port), timeout=5)
    raw.sendall(b"XREADGROUP GROUP billing zed COUNT 1 STREAMS orders >\r\nXADD orders * a 1\r\n")
    got = b""
    while got.count(b"\r\n") < 2:
        got += raw.recv(4096)
    raw.close()
    assert got == (b"-" + READONLY.encode() + b"\r\n") * 2
    # Inside MULTI the write is refused at queue time and EXEC aborts, as in Redis.
    raw = socket.create_connection(("127.0.0.1", r.port), timeout=5)
    raw.sendall(b"MULTI\r\nXADD orders * a 1\r\nXLEN orders\r\nEXEC\r\n")
    got = b""
    while got.count(b"\r\n") < 4:
        got += raw.recv(4096)
    raw.close()
    assert got == (b"+OK\r\n-" + READONLY.encode() + b"\r\n+QUEUED\r\n"
                   b"-EXECABORT Transaction discarded because of previous errors.\r\n")
    # Reads are served.
    assert rr.xlen("orders") > 0
    assert rr.xrange("orders", count=1)
    assert rr.xpending("orders", "billing")["pending"] >= 0


def test_blocked_xread_on_replica_wakes_on_primary_write(pair):
    p, r = pair
    rp, rr = client(p), client(r)
    wait_until(lambda: link_up(rr), what="link up")
    blocked = client(r)
    result = {}

    import threading
    t = threading.Thread(target=lambda: result.setdefault(
        "v", blocked.xread({"wake": "$"}, block=10000)))
    t.start()
    wait_until(lambda: info(rr, "clients")["blocked_clients"] == 1, 5, "reader blocked")
    t0 = time.monotonic()
    rp.xadd("wake", {"hello": "replica"}, id="9-1")
    t.join(10)
    assert result["v"] == [[b"wake", [(b"9-1", {b"hello": b"replica"})]]]
    assert time.monotonic() - t0 < 2


def test_publish_reaches_the_replicas_subscribers_and_never_the_aof(pair):
    """Redis propagates PUBLISH to replicas (a subscriber of a replica hears the
    primary's messages, as Sentinel's hello exchange relies on) but a message is
    not data: no AOF holds it, so no restart replays it."""
    p, r = pair
    rp, rr = client(p), client(r)
    wait_until(lambda: link_up(rr), what="link up")
    listener = rr.pubsub()
    listener.subscribe("news")
    assert listener.get_message(timeout=5)["type"] == "subscribe"
    assert rp.publish("news", "from the primary") == 0     # no subscriber on the primary
    message = listener.get_message(timeout=5)
    assert message is not None and message["data"] == b"from the primary"
    listener.close()
    rp.xadd("after-message", {"k": "v"})                   # a write behind it, then flushed
    wait_synced(rp, rr)
    for server in (p, r):
        aof = b"".join(f.read_bytes() for f in (server.data_dir / "appendonlydir").iterdir())
        assert b"after-message" in aof and b"PUBLISH" not in aof.upper()


def test_wait_counts_replicas_and_role(pair):
    p, r = pair
    rp, rr = client(p), client(r)
    wait_until(lambda: link_up(rr), what="link up")
    rp.xadd("waited", {"a": 1})
    t0 = time.monotonic()
    assert rp.execute_command("WAIT", 1, 5000) == 1
    assert time.monotonic() - t0 < 2          # GETACK: no need to wait for the 1 s ack
    t0 = time.monotonic()
    assert rp.execute_command("WAIT", 2, 300) == 1      # only one replica: times out
    assert 0.25 < time.monotonic() - t0 < 3
    assert rp.execute_command("WAIT", 0, 0) == 1
    with pytest.raises(redis.ResponseError, match="WAIT cannot be used with replica instances"):
        rr.execute_command("WAIT", 1, 10)
    role = rp.execute_command("ROLE")
    assert role[0] == b"master" and len(role[2]) == 1 and role[2][0][1] == str(r.port).encode()
    rrole = rr.execute_command("ROLE")
    assert rrole[:4] == [b"slave", b"127.0.0.1", p.port, b"connected"]
    ri = info(rr)
    for field in ("master_host", "master_port", "master_last_io_seconds_ago",
                  "master_sync_in_progress", "slave_read_repl_offset", "slave_repl_offset",
                  "slave_priority", "slave_read_only", "connected_slaves", "master_replid",
                  "master_repl_offset"):
        assert field in ri, field
    assert ri["role"] == "slave" and ri["slave_read_only"] == 1
    pi = info(rp)
    assert pi["slave0"]["state"] == "online" and pi["slave0"]["port"] == r.port
    assert pi["repl_backlog_active"] == 1 and pi["master_replid"] == ri["master_replid"]


def test_compare_tool_reports_equal(pair):
    p, r = pair
    out = subprocess.run([sys.executable, "-m", "streamdb.cli.compare_replica",
                          "--primary", f"127.0.0.1:{p.port}", "--replica", f"127.0.0.1:{r.port}"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "digest: equal" in out.stdout and "lag_bytes:" in out.stdout


def test_compare_tool_says_at_once_that_a_primary_is_not_a_replica(pair):
    """Given a server that follows nobody (one just promoted, say), the tool says so and
    exits 2 at once instead of waiting --timeout for it to catch up."""
    p, _ = pair
    out = subprocess.run([sys.executable, "-m", "streamdb.cli.compare_replica", "--timeout", "60",
                          "--primary", f"127.0.0.1:{p.port}", "--replica", f"127.0.0.1:{p.port}"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert out.stderr == f"error: 127.0.0.1:{p.port} is not a replica (role: master); nothing " \
                         "to compare it with\n"
    assert "did not catch up" not in out.stdout


def test_partial_resync_after_replica_kill9_and_restart(tmp_path):
    with ServerProcess(tmp_path / "p", "--save", "") as p:
        rp = client(p)
        populate(rp)
        rep = replica_of(tmp_path / "r", p)
        with rep:
            rr = client(rep)
            wait_synced(rp, rr)
            for i in range(100):
                rp.xadd("orders", {"more": i})
            rp.xreadgroup("billing", "alice", {"orders": ">"}, count=7)
            wait_synced(rp, rr)
            time.sleep(0.2)            # the state file is written at the end of the turn
            rep.kill9()
            # The replica's own AOF holds what it applied (full-sync payload and live effects).
            aof = b"".join(f.read_bytes() for f in (tmp_path / "r" / "appendonlydir").glob("*.aof"))
            assert b"FLUSHALL" in aof and b"RESTORE" in aof and b"XCLAIM" in aof
            wait_until(lambda: info(rp)["connected_slaves"] == 0, 5, "primary to see the link drop")
            for i in range(40):        # missed while the replica is down
                rp.xadd("orders", {"missed": i})
            rp.xreadgroup("billing", "bob", {"orders": ">"}, count=3)
            rep.start()
            rr = client(rep)
            wait_synced(rp, rr)
            stats = rp.info("stats")
            assert stats["sync_full"] == 1 and stats["sync_partial_ok"] == 1, stats
            assert "Partial resynchronization request" in p.log_text()
            assert "Successful partial resynchronization" in rep.log_text()


def test_backlog_overflow_forces_full_resync(tmp_path):
    with ServerProcess(tmp_path / "p", "--save", "", "--repl-backlog-size", "16384") as p:
        rp = client(p)
        rp.xadd("s", {"a": 1})
        rep = replica_of(tmp_path / "r", p)
        with rep:
            rr = client(rep)
            wait_synced(rp, rr)
            rep.stop()
            for i in range(300):       # ~30 KB: more than the backlog holds
                rp.xadd("s", {"v": "y" * 80})
            assert info(rp)["repl_backlog_histlen"] <= 16384
            rep.start()
            rr = client(rep)
            wait_synced(rp, rr)
            stats = rp.info("stats")
            assert stats["sync_full"] == 2 and stats["sync_partial_err"] == 1, stats
            assert rr.xlen("s") == 301


def test_promotion_keeps_data_and_psync2(tmp_path):
    with ServerProcess(tmp_path / "p", "--save", "") as p:
        rp = client(p)
        populate(rp)
        with replica_of(tmp_path / "r1", p) as r1, replica_of(tmp_path / "r2", p) as r2:
            c1, c2 = client(r1), client(r2)
            digest = wait_synced(rp, c1)
            wait_synced(rp, c2)
            old_id = info(rp)["master_replid"]
            p.stop()                   # the primary goes away
            wait_until(lambda: not link_up(c1), 5, "r1 to notice")
            assert c1.execute_command("REPLICAOF", "NO", "ONE") == b"OK"
            i1 = info(c1)
            assert i1["role"] == "master" and i1["master_replid2"] == old_id
            assert i1["second_repl_offset"] == info(c2)["slave_repl_offset"] + 1
            assert c1.execute_command("DEBUG", "DIGEST") == digest
            c1.xadd("orders", {"after": "promotion"})          # writes accepted
            c1.xreadgroup("billing", "alice", {"orders": ">"}, count=2)
            # The other replica of the old primary continues from the promoted one.
            assert c2.execute_command("REPLICAOF", "127.0.0.1", r1.port) == b"OK"
            wait_synced(c1, c2)
            assert c1.info("stats")["sync_partial_ok"] == 1
            assert c1.info("stats")["sync_full"] == 0
            assert info(c2)["master_replid"] == info(c1)["master_replid"]


def test_planned_failover_old_primary_rejoins_partially(tmp_path):
    with ServerProcess(tmp_path / "p", "--save", "") as p, replica_of(tmp_path / "r", p) as r:
        cp, cr = client(p), client(r)
        populate(cp)
        wait_synced(cp, cr)
        assert cr.execute_command("REPLICAOF", "NO", "ONE") == b"OK"
        cr.xadd("orders", {"on": "new primary"})
        cr.xreadgroup("billing", "zoe", {"orders": ">"}, count=4)
        # The old primary follows the promoted replica: its own id/offset are the
        # promoted one's replid2/second offset, so only the new bytes travel.
        assert cp.execute_command("REPLICAOF", "127.0.0.1", r.port) == b"OK"
        wait_until(lambda: link_up(cp), what="old primary linked")
        wait_synced(cr, cp)
        assert cr.info("stats")["sync_partial_ok"] == 1 and cr.info("stats")["sync_full"] == 0
        with pytest.raises(redis.ReadOnlyError):
            cp.xadd("orders", {"no": 1})
        assert cp.execute_command("REPLICAOF", "127.0.0.1", r.port) == b"OK Already connected to specified master"


def test_chained_replica_and_masterauth(tmp_path):
    # requirepass is set after start: the helper's readiness probe pings without AUTH.
    def protect(srv):
        redis.Redis(port=srv.port).config_set("requirepass", "s3cret")
        return redis.Redis(port=srv.port, password="s3cret")

    with ServerProcess(tmp_path / "p", "--save", "") as p:
        cp = protect(p)
        with replica_of(tmp_path / "r1", p, "--masterauth", "s3cret") as r1:
            c1 = protect(r1)
            sub = ServerProcess(tmp_path / "r2", "--save", "", "--replicaof", "127.0.0.1",
                                str(r1.port), "--masterauth", "s3cret")
            with sub:
                c2 = redis.Redis(port=sub.port)
                populate(cp)
                for i in range(30):
                    cp.xadd("orders", {"chain": i})
                d = wait_synced(cp, c1)
                wait_until(lambda: c2.execute_command("DEBUG", "DIGEST") == d, 10, "chained replica")
                # Same ids and offsets down the chain (psync2).
                assert info(c2)["master_replid"] == info(cp)["master_replid"]
                wait_until(lambda: info(c2)["master_repl_offset"] == info(cp)["master_repl_offset"])
                with pytest.raises(redis.AuthenticationError):
                    redis.Redis(port=p.port, password="wrong").ping()


def test_link_timeout_then_partial_resync(tmp_path):
    import os
    import signal
    with ServerProcess(tmp_path / "p", "--save", "", "--repl-ping-replica-period", "1") as p, \
            replica_of(tmp_path / "r", p, "--repl-timeout", "2") as r:
        cp, cr = client(p), client(r)
        cp.xadd("s", {"a": 1})
        wait_synced(cp, cr)
        os.kill(p.proc.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: not link_up(cr), 6, "replica to time the link out")
        finally:
            os.kill(p.proc.pid, signal.SIGCONT)
        cp.xadd("s", {"b": 2})
        wait_synced(cp, cr)
        assert "Connection with master lost (timeout)" in r.log_text()
        assert cp.info("stats")["sync_partial_ok"] >= 1 and cp.info("stats")["sync_full"] == 1


def test_state_file_not_matching_the_aof_means_full_resync(tmp_path):
    with ServerProcess(tmp_path / "p", "--save", "") as p:
        cp = client(p)
        cp.xadd("s", {"a": 1})
        rep = replica_of(tmp_path / "r", p)
        with rep:
            wait_synced(cp, client(rep))
            time.sleep(0.2)
        state = tmp_path / "r" / "replication.state"
        parts = state.read_text().split()
        parts[4] = str(int(parts[4]) - 1)      # as if killed between AOF write and state write
        state.write_text(" ".join(parts) + "\n")
        cp.xadd("s", {"b": 2})
        with rep:
            wait_synced(cp, client(rep))
            assert "does not match the AOF" in rep.log_text()
        assert cp.info("stats")["sync_full"] == 2 and cp.info("stats")["sync_partial_ok"] == 0
