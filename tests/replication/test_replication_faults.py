"""Replication faults with real processes on loopback: the primary restarted from its
AOF (replid kept when the AOF proves the offset, a new one when it does not), link cut
and replica kill -9 during the full-sync transfer, a replica far behind under
continuous load, failover with the old primary rejoining, WAIT on the client's own
last write.  After each: DEBUG DIGEST and every group's state equal on both sides."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest
import redis

from helpers import ServerProcess
from linkproxy import LinkProxy
from streamdb.cli.compare_replica import all_group_detail
from test_replication import client, info, link_up, populate, replica_of, wait_synced, wait_until



def assert_same(p: redis.Redis, r: redis.Redis) -> None:
    """Digests equal once caught up, and each group's PEL, consumers, last-delivered id,
    entries-read and lag equal (the digest covers them too; this says which differs)."""
    wait_synced(p, r, timeout=30)
    groups = all_group_detail(p)
    assert groups == all_group_detail(r)
    assert groups, "the dataset has consumer groups to compare"


def bulk_xadd(port: int, key: str, n: int, width: int = 40) -> None:
    """n XADDs pipelined on a raw socket (far faster than building them in redis-py)."""
    cmd = b"*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$1\r\n*\r\n$1\r\nf\r\n$%d\r\n%s\r\n" % (
        len(key), key.encode(), width, b"v" * width)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        sent = 0
        while sent < n:
            k = min(5000, n - sent)
            s.sendall(cmd * k)
            got, last = 0, b""
            while got < 2 * k:      # each reply is "$<len>\r\n<id>\r\n"
                data = s.recv(1 << 20)
                assert data, "server closed the connection"
                # (a \r\n split between two reads counts too)
                got += (last + data).count(b"\r\n") - last.count(b"\r\n")
                last = data[-1:]
            sent += k


def read_groups(rc: redis.Redis, n: int = 40) -> None:
    rc.xreadgroup("billing", "alice", {"orders": ">"}, count=n)
    ids = [e[0] for e in rc.xrange("orders", count=3)]
    rc.xack("orders", "billing", *ids[:1])


def state_saved(srv, r: redis.Redis) -> bool:
    """The primary's cron saved its current offset (the state matches its AOF's end)."""
    path = srv.data_dir / "replication.state"
    return path.exists() and path.read_text().split()[1] == str(info(r)["master_repl_offset"])


@pytest.mark.parametrize("fsync", ["everysec", "always"])
def test_primary_kill9_restart_from_aof_keeps_replid_and_resyncs_partially(tmp_path, fsync):
    # (Under always the segment ends with preallocated zeros: the restart's AOF end is
    # where its frames end, which the saved state must match.)
    p = ServerProcess(tmp_path / "p", "--save", "", "--appendfsync", fsync)
    with p:
        cp = client(p)
        populate(cp)
        with replica_of(tmp_path / "r", p) as r:
            cr = client(r)
            assert_same(cp, cr)
            replid = info(cp)["master_replid"]
            # The state is saved by the primary's cron (10 Hz): after a quiet moment it
            # describes the end of the AOF.
            wait_until(lambda: state_saved(p, cp), 5, "state saved")
            p.kill9()
            wait_until(lambda: not link_up(cr), 5, "replica to see the link drop")
            p.start()
            cp = client(p)
            # The old id is kept as the secondary one, valid up to the restored offset.
            assert info(cp)["master_replid2"] == replid
            assert "restored from the AOF" in p.log_text()
            read_groups(cp)
            cp.xadd("orders", {"after": "restart"})
            assert_same(cp, cr)
            stats = cp.info("stats")
            assert stats["sync_partial_ok"] == 1 and stats["sync_full"] == 0, stats
            assert "Successful partial resynchronization" in r.log_text()


def test_primary_that_lost_its_aof_tail_takes_a_new_replid_and_replica_follows(tmp_path):
    """The replica saw a write the restarted primary no longer has: it must not keep it."""
    p = ServerProcess(tmp_path / "p", "--save", "")
    with p:
        cp = client(p)
        populate(cp)
        with replica_of(tmp_path / "r", p) as r:
            cr = client(r)
            assert_same(cp, cr)
            old = info(cp)["master_replid"]
            last = cp.xadd("orders", {"will": "be lost"})
            assert_same(cp, cr)
            wait_until(lambda: state_saved(p, cp), 5, "state saved")
            p.kill9()
            # A torn tail: the last frame loses its final bytes (aof-load-truncated cuts it).
            segs = sorted((tmp_path / "p" / "appendonlydir").glob("*.incr.aof"))
            with open(segs[-1], "r+b") as f:
                f.truncate(os.path.getsize(segs[-1]) - 3)
            p.start()
            cp = client(p)
            assert old not in (info(cp)["master_replid"], info(cp)["master_replid2"])
            assert "does not match the AOF" in p.log_text()
            assert cp.xrange("orders", last, last) == []
            assert_same(cp, cr)
            assert cr.xrange("orders", last, last) == []
            assert cp.info("stats")["sync_full"] == 1


def test_link_cut_in_the_middle_of_the_full_sync_payload(tmp_path):
    with ServerProcess(tmp_path / "p", "--save", "") as p:
        cp = client(p)
        populate(cp)
        bulk_xadd(p.port, "big", 60000)
        with LinkProxy(p.port, cut_after=300_000) as proxy:
            # REPLICAOF at run time: while the payload loads the replica answers
            # -LOADING, which the start-up helper's PING probe would wait out.
            with ServerProcess(tmp_path / "r", "--save", "") as r:
                cr = client(r)
                cr.replicaof("127.0.0.1", proxy.port)
                assert proxy.cut_done.wait(20)
                read_groups(cp)
                assert_same(cp, cr)
                assert proxy.connections >= 2
                assert cp.info("stats")["sync_full"] == 2
                # A cut of the live link (CLIENT KILL TYPE replica) resyncs partially.
                assert cp.execute_command("CLIENT", "KILL", "TYPE", "replica") == 1
                cp.xadd("orders", {"after": "kill"})
                assert_same(cp, cr)
                assert cp.info("stats")["sync_partial_ok"] == 1


def test_replica_kill9_during_the_full_sync_transfer(tmp_path):
    with ServerProcess(tmp_path / "p", "--save", "") as p:
        cp = client(p)
        populate(cp)
        bulk_xadd(p.port, "big", 60000)
        with LinkProxy(p.port, hold_after=200_000) as proxy:
            r = ServerProcess(tmp_path / "r", "--save", "")
            with r:
                cr = client(r)
                cr.replicaof("127.0.0.1", proxy.port)
                assert proxy.held.wait(20)
                # The relay sent its part; the replica reads it on its own time.
                ri = wait_until(lambda: (lambda i: i if i.get("master_sync_read_bytes", 0) > 0
                                         else None)(info(cr)), 10, "payload bytes read")
                assert ri["master_sync_in_progress"] == 1 and ri["master_link_status"] == "down"
                assert ri["master_sync_read_bytes"] <= 200_000
                # Half a payload is here, kept aside: the replica serves its old (empty) data.
                assert cr.xlen("big") == 0 and cr.dbsize() == 0
                r.kill9()
                assert len(list(r.data_dir.glob("temp-fullsync-*"))) == 1
                r.args += ["--replicaof", "127.0.0.1", str(proxy.port)]
                proxy.release()
                read_groups(cp)
                r.start()
                cr = client(r)
                assert_same(cp, cr)
                assert cp.info("stats")["sync_full"] == 2
                # The next sync removed the payload the killed run left.
                assert list(r.data_dir.glob("temp-fullsync-*")) == []


def test_replica_far_behind_under_continuous_load_catches_up(tmp_path):
    with ServerProcess(tmp_path / "p", "--save", "", "--repl-backlog-size", "64mb") as p, \
            replica_of(tmp_path / "r", p) as r:
        cp, cr = client(p), client(r)
        populate(cp)
        assert_same(cp, cr)
        stop = threading.Event()
        written = []

        def load():
            w = client(p)
            i = 0
            while not stop.is_set():
                with w.pipeline(transaction=False) as pipe:
                    for _ in range(50):
                        pipe.xadd("orders", {"load": i, "pad": "z" * 64})
                        i += 1
                    pipe.xreadgroup("billing", "loader", {"orders": ">"}, count=20)
                    pipe.execute()
                pend = w.xpending_range("orders", "billing", "-", "+", 10, "loader")
                if pend:
                    w.xack("orders", "billing", *[e["message_id"] for e in pend])
            written.append(i)

        t = threading.Thread(target=load)
        t.start()
        try:
            time.sleep(0.3)
            os.kill(r.proc.pid, signal.SIGSTOP)       # the replica falls behind
            try:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and \
                        info(cp)["master_repl_offset"] - info(cp)["slave0"]["offset"] < 1_000_000:
                    time.sleep(0.05)
                behind = info(cp)["master_repl_offset"] - info(cp)["slave0"]["offset"]
            finally:
                os.kill(r.proc.pid, signal.SIGCONT)
            assert behind >= 1_000_000
            time.sleep(1.0)                            # catching up while the load goes on
        finally:
            stop.set()
            t.join(30)
        assert written and written[0] > 1000
        assert_same(cp, cr)
        assert cp.info("stats")["sync_full"] == 1      # never needed a full resync


def test_failover_then_old_primary_restarts_as_replica_of_the_new_one(tmp_path):
    p = ServerProcess(tmp_path / "p", "--save", "")
    with p, replica_of(tmp_path / "r", p) as r:
        cp, cr = client(p), client(r)
        populate(cp)
        assert_same(cp, cr)
        wait_until(lambda: state_saved(p, cp), 5, "state saved")
        p.kill9()                                     # the primary dies
        assert cr.execute_command("REPLICAOF", "NO", "ONE") == b"OK"
        cr.xadd("orders", {"on": "new primary"})
        read_groups(cr)
        # The old primary comes back from its AOF as a replica of the promoted one:
        # its saved id/offset are the new primary's replid2 / second offset (psync2).
        p.args += ["--replicaof", "127.0.0.1", str(r.port)]
        p.start()
        cp = client(p)
        wait_until(lambda: link_up(cp), 10, "old primary linked")
        assert_same(cr, cp)
        stats = cr.info("stats")
        assert stats["sync_partial_ok"] == 1 and stats["sync_full"] == 0, stats
        with pytest.raises(redis.ReadOnlyError):
            cp.xadd("orders", {"no": 1})


def test_wait_waits_for_the_clients_own_last_write(tmp_path):
    with ServerProcess(tmp_path / "p", "--save", "") as p, replica_of(tmp_path / "r", p) as r:
        writer, idle = client(p), client(p)
        cr = client(r)
        writer.xadd("s", {"a": 1})
        wait_synced(writer, cr)
        assert writer.execute_command("WAIT", 1, 5000) == 1
        os.kill(r.proc.pid, signal.SIGSTOP)
        try:
            writer.xadd("s", {"b": 2})
            # The writer's last write is not acknowledged: WAIT times out with 0.
            assert writer.execute_command("WAIT", 1, 300) == 0
            # A client that wrote nothing has nothing to wait for (Redis: c->woff).
            assert idle.execute_command("WAIT", 1, 0) == 1
        finally:
            os.kill(r.proc.pid, signal.SIGCONT)
        assert writer.execute_command("WAIT", 1, 5000) == 1


def test_slow_replica_dropped_by_output_buffer_limit_then_resyncs(tmp_path):
    with ServerProcess(tmp_path / "p", "--save", "", "--repl-backlog-size", "64mb") as p, \
            replica_of(tmp_path / "r", p) as r:
        cp, cr = client(p), client(r)
        populate(cp)
        assert_same(cp, cr)
        cp.config_set("client-output-buffer-limit", "replica 256kb 0 0")
        os.kill(r.proc.pid, signal.SIGSTOP)          # the replica stops reading
        try:
            deadline = time.monotonic() + 20
            while cp.info("stats")["client_output_buffer_limit_disconnections"] == 0:
                assert time.monotonic() < deadline, "the slow replica was never dropped"
                bulk_xadd(p.port, "flood", 5000, width=200)
        finally:
            os.kill(r.proc.pid, signal.SIGCONT)
        assert "overcoming of output buffer limits" in p.log_text()
        read_groups(cp)
        assert_same(cp, cr)
        assert cp.info("stats")["sync_partial_ok"] >= 1 and cp.info("stats")["sync_full"] == 1


STATE_MISMATCH = "Replication state does not match the AOF"


def _saved_state(srv: ServerProcess) -> list[str]:
    """replication.state's fields (state.py), [] before the first save."""
    path = srv.data_dir / "replication.state"
    return path.read_text().split() if path.exists() else []


def _kill9_with_state_behind_the_aof(srv: ServerProcess) -> None:
    """kill -9 right after a burst of writes, until replication.state (saved by the
    cron: --hz 1 makes it once a second) is behind the AOF's end, the usual case
    after a kill -9; the server is down on return."""
    for _ in range(5):
        bulk_xadd(srv.port, "burst", 200)
        srv.kill9()
        parts = _saved_state(srv)
        segment, size = srv.data_dir / "appendonlydir" / parts[3], int(parts[4])
        if segment.stat().st_size != size:
            return
        srv.start()
    pytest.fail("the state file kept up with the AOF through 5 kills")


def _restart_log(srv: ServerProcess) -> str:
    """Start ``srv`` again; what it logged up to and including "Ready"."""
    before = len(srv.log_text())
    srv.start()
    text = srv.log_text()[before:]
    assert "Ready to accept connections" in text
    return text


def test_kill9_of_a_primary_nobody_followed_says_nothing_of_replication_state(tmp_path):
    p = ServerProcess(tmp_path / "p", "--save", "", "--hz", "1")
    with p:
        client(p).xadd("s", {"a": 1})
        wait_until(lambda: _saved_state(p), 5, "state saved")
        _kill9_with_state_behind_the_aof(p)
        assert STATE_MISMATCH not in _restart_log(p)
        assert client(p).xlen("burst") >= 200


def test_kill9_of_a_followed_primary_notes_the_full_resync_before_ready(tmp_path):
    p = ServerProcess(tmp_path / "p", "--save", "", "--hz", "1")
    with p:
        cp = client(p)
        cp.xadd("s", {"a": 1})
        with replica_of(tmp_path / "r", p) as r:
            cr = client(r)
            wait_synced(cp, cr)
            wait_until(lambda: _saved_state(p)[-1:] == ["1"], 5, "state saved as followed")
            _kill9_with_state_behind_the_aof(p)
            text = _restart_log(p)
            lines = text.splitlines()
            mismatch = [i for i, line in enumerate(lines) if STATE_MISMATCH in line]
            ready = [i for i, line in enumerate(lines) if "Ready to accept connections" in line]
            assert len(mismatch) == 1 and mismatch[0] < ready[0], text
            assert f" * {STATE_MISMATCH}" in lines[mismatch[0]]      # notice level
            cp = client(p)
            # The replica's data already equals the restarted primary's, so "synced" can
            # hold before the replica has even reconnected: wait for the resync itself.
            wait_until(lambda: cp.info("stats")["sync_full"] >= 1, 30, "the replica's resync")
            wait_synced(cp, cr, timeout=30)
            assert cp.info("stats")["sync_full"] == 1                # what the line announced
            assert cp.info("stats")["sync_partial_ok"] == 0


def test_replica_switched_between_busy_primaries_follows_only_the_last(tmp_path):
    """REPLICAOF to one primary, then another, again and again while both stream writes:
    the side following the previous primary stops at once (never applies another chunk,
    never loads a payload over its successor's data) and the replica ends equal to the
    primary it follows last, with no error in its log."""
    a = ServerProcess(tmp_path / "a", "--save", "")
    b = ServerProcess(tmp_path / "b", "--save", "")
    with a, b, replica_of(tmp_path / "r", a) as r:
        ca, cb, cr = client(a), client(b), client(r)
        populate(ca)
        populate(cb)
        stop = threading.Event()

        def write(c: redis.Redis, tag: str) -> None:
            n = 0
            while not stop.is_set():
                c.xadd("orders", {tag: n})
                n += 1

        writers = [threading.Thread(target=write, args=(c, t), daemon=True)
                   for c, t in ((client(a), "a"), (client(b), "b"))]
        for t in writers:
            t.start()
        try:
            for i in range(40):
                target = b if i % 2 == 0 else a
                assert cr.execute_command("REPLICAOF", "127.0.0.1", str(target.port)) == b"OK"
                time.sleep(0.005 * (i % 7))       # switch at every stage of the handshake
        finally:
            stop.set()
            for t in writers:
                t.join(10)
        last = a                                  # (i = 39 switched to a)
        wait_until(lambda: link_up(cr), 15, "replica linked to its last primary")
        assert_same(client(last), cr)
    log = r.log_text()
    assert "Traceback" not in log and "exception" not in log.lower(), log[-3000:]
