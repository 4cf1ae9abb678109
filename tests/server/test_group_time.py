"""A consumer group's lag in time and moving it to a time, on real server processes:
STREAMDB.GROUP INFO and STREAMDB.GROUP SETID ... TIME | EARLIEST | LATEST, their
propagation (a replica, AOF replay), cold history (a small stream-cache-size), the
metrics endpoint and ``streamdb-admin group``.

The server reads its own clock for "now"; a test brackets each call between two
readings of the same machine's clock, so an age must lie between them for one
entry's id and no other (entries are spaced SPACING ms apart, far more than a call
takes).  Nothing here asserts how long anything took.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import pytest
import redis

from docblocks import run_block
from helpers import ROOT, wait_until
from streamdb.cli.procs import free_port
# The retention tests' servers (stream-node-max-entries NODE: many nodes from few entries).
from test_retention import (NODE, client, killed_and_replayed,  # noqa: F401  (rc, srv:
                            primary_and_replica, rc, srv, start,  # fixtures)
                            wait_synced)

BASE_MS = 1_000_000_000_000   # 2001: old for any clock, and for any retention age
SPACING = 1_000_000           # ms between consecutive test entries (about 17 minutes)
DOC_BLOCKS = {"docs/OPERATIONS.md": {"group-time"}}


def ms_of(i: int) -> int:
    """The time of test entry ``i``."""
    return BASE_MS + i * SPACING


def sid(i: int) -> bytes:
    return f"{ms_of(i)}-0".encode()


def fill(r: redis.Redis, key: str, indexes) -> None:
    pipe = r.pipeline(transaction=False)
    for i in indexes:
        pipe.xadd(key, {"n": str(i)}, id=sid(i))
        if len(pipe) >= 2000:
            pipe.execute()
    pipe.execute()


def as_dict(reply) -> dict:
    # (A map under RESP3, a flat array under RESP2: redis-py gives either as it was sent.)
    return reply if isinstance(reply, dict) else dict(zip(reply[0::2], reply[1::2]))


def group_info(r: redis.Redis, key: str, group: str) -> tuple[dict, int, int]:
    """STREAMDB.GROUP INFO, with the clock read (ms) just before and just after it."""
    before = int(time.time() * 1000)
    info = as_dict(r.execute_command("STREAMDB.GROUP", "INFO", key, group))
    after = int(time.time() * 1000) + 1
    return info, before, after


def aged(age_ms: int, before: int, after: int, entry_ms: int) -> bool:
    """Whether ``age_ms`` is the age of an entry of time ``entry_ms`` at some moment
    between ``before`` and ``after``."""
    return before - entry_ms <= age_ms <= after - entry_ms


def first_after(r: redis.Redis, key: str, last_id: bytes):
    got = r.xrange(key, b"(" + last_id, "+", count=1)
    return got[0][0] if got else None


def assert_time_lag(r: redis.Redis, key: str, group: str) -> dict:
    """INFO's lag-ms is the age of the first entry XRANGE shows after the group's last id
    (0 when none), and its lag the number of entries after it when it is known."""
    info, before, after = group_info(r, key, group)
    nxt = first_after(r, key, info[b"last-delivered-id"])
    if nxt is None:
        assert info[b"lag-ms"] == 0
    else:
        assert aged(info[b"lag-ms"], before, after, int(nxt.split(b"-")[0])), (info, nxt)
    if info[b"lag"] is not None:
        assert info[b"lag"] == len(r.xrange(key, b"(" + info[b"last-delivered-id"], "+"))
    return info


def entries_after(r: redis.Redis, key: str, last_id: bytes) -> int:
    return len(r.xrange(key, b"(" + last_id, "+"))


# ---------------------------------------------------------------------------
# STREAMDB.GROUP INFO: lag in time
# ---------------------------------------------------------------------------


def test_info_fields_in_order_under_resp2_and_resp3(srv, rc):
    fill(rc, "s", range(30))
    rc.xgroup_create("s", "g", id="0")
    rc.xreadgroup("g", "c1", {"s": ">"}, count=4)
    rc.execute_command("XNACK", "s", "g", "SILENT", "IDS", 1, sid(0))
    r2 = redis.Redis(port=srv.port, protocol=2)
    flat = r2.execute_command("STREAMDB.GROUP", "INFO", "s", "g")
    r2.close()
    assert flat[0::2] == [b"name", b"consumers", b"pending", b"nacked", b"last-delivered-id",
                          b"entries-read", b"lag", b"lag-ms", b"oldest-pending-ms",
                          b"dead-lettered", b"max-deliveries", b"dead-letter-key"]
    info = dict(zip(flat[0::2], flat[1::2]))
    assert (info[b"name"], info[b"consumers"], info[b"pending"], info[b"nacked"]) == (b"g", 1, 4, 1)
    assert (info[b"dead-lettered"], info[b"max-deliveries"], info[b"dead-letter-key"]) == (0, None, None)
    assert (info[b"last-delivered-id"], info[b"entries-read"], info[b"lag"]) == (sid(3), 4, 26)
    r3 = redis.Redis(port=srv.port, protocol=3)
    try:
        info, before, after = group_info(r3, "s", "g")
        assert isinstance(info, dict) and list(info) == flat[0::2]
        assert aged(info[b"lag-ms"], before, after, ms_of(4))
        assert aged(info[b"oldest-pending-ms"], before, after, ms_of(0))
    finally:
        r3.close()


def test_time_lag_follows_the_ids_under_xdel_and_xtrim(rc):
    fill(rc, "s", range(100))
    rc.xgroup_create("s", "g", id="0")
    assert assert_time_lag(rc, "s", "g")[b"oldest-pending-ms"] == 0
    rc.xreadgroup("g", "c", {"s": ">"}, count=15)
    # The entries right after the group's last id deleted (the rest of its node, 15..19,
    # and the next node's first six): the next one that exists counts.
    rc.xdel("s", *[sid(i) for i in range(15, 26)])
    info = assert_time_lag(rc, "s", "g")
    assert info[b"lag"] is None        # Redis's rule: a deleted entry ahead, not counted
    # The oldest pending entry deleted from the stream still is the oldest pending.
    rc.xdel("s", sid(0))
    info, before, after = group_info(rc, "s", "g")
    assert aged(info[b"oldest-pending-ms"], before, after, ms_of(0))
    rc.xack("s", "g", *[sid(i) for i in range(5)])
    info, before, after = group_info(rc, "s", "g")
    assert aged(info[b"oldest-pending-ms"], before, after, ms_of(5))
    # Trimmed past the group's last id: the stream's first entry is the oldest not given.
    rc.xtrim("s", minid=sid(40))
    rc.xdel("s", sid(40), sid(41))
    assert first_after(rc, "s", sid(14)) == sid(42)
    assert_time_lag(rc, "s", "g")
    # Read to the end: nothing left to give.
    rc.xreadgroup("g", "c", {"s": ">"})
    info = assert_time_lag(rc, "s", "g")
    assert (info[b"lag-ms"], info[b"lag"]) == (0, 0)
    # A deleted last entry: still nothing to give.
    rc.xdel("s", sid(99))
    assert group_info(rc, "s", "g")[0][b"lag-ms"] == 0


def test_time_lag_after_retention_trims(rc):
    fill(rc, "s", range(60))
    rc.xgroup_create("s", "g", id="0")
    rc.xreadgroup("g", "c", {"s": ">"}, count=5)
    # A day's retention: the ids are from 2001, so every node but the last goes.
    rc.execute_command("STREAMDB.RETENTION", "SET", "s", "MAXAGE", 86_400_000)
    wait_until(lambda: rc.xlen("s") == NODE, what="retention to trim")
    info = assert_time_lag(rc, "s", "g")
    assert first_after(rc, "s", info[b"last-delivered-id"]) == sid(50)


def test_time_lag_reads_at_most_a_node_of_cold_history(tmp_path):
    srv = start(tmp_path / "cold", "--appendonly", "yes", "--stream-cache-size", "64kb")
    try:
        r = client(srv)
        n = 20_000
        fill(r, "s", range(n))
        r.xgroup_create("s", "g", id=sid(5004))          # inside the node 5000..5009
        r.xgroup_create("s", "h", id=sid(12_009))        # the last of its node
        r.xdel("s", sid(12_010))                         # ... and the next node's first deleted

        def settled():
            mem = r.info("memory")
            return r.info("persistence")["rdb_bgsave_in_progress"] == 0 and \
                mem["stream_cache_evictions"] > 0 and \
                mem["stream_cache_resident_bytes"] <= 64 * 1024
        wait_until(settled, 120, "sealed nodes made durable and evicted")

        def cold_reads() -> int:
            return r.info("memory")["stream_cache_cold_reads"]
        for group, expected_next in (("g", 5005), ("h", 12_011)):
            reads = cold_reads()
            info, before, after = group_info(r, "s", group)
            assert cold_reads() - reads <= 1, f"{group}: read more than one node"
            assert aged(info[b"lag-ms"], before, after, ms_of(expected_next))
        # A reset to a time in the middle of the cold history: one node read.
        reads = cold_reads()
        r.execute_command("STREAMDB.GROUP", "SETID", "s", "g", "TIME", ms_of(7777) - 1)
        assert cold_reads() - reads <= 1
        info = as_dict(r.execute_command("STREAMDB.GROUP", "INFO", "s", "g"))
        assert info[b"last-delivered-id"] == sid(7776)
        assert info[b"entries-read"] == 7777
        assert info[b"lag"] is None          # 12010 was deleted after it (Redis's rule)
        r.close()
    finally:
        srv.stop()


# ---------------------------------------------------------------------------
# STREAMDB.GROUP SETID ... TIME | EARLIEST | LATEST
# ---------------------------------------------------------------------------


def test_reset_to_a_time_counts_as_xrange_and_the_lag_stays_exact(rc):
    fill(rc, "s", range(0, 300, 3))                      # 100 entries, times 3 steps apart
    rc.xgroup_create("s", "g", id="$")
    rc.xreadgroup("g", "c", {"s": ">"})                  # nothing new: $ is the end
    for t in (ms_of(0), ms_of(0) + 1, ms_of(150), ms_of(151), ms_of(152), ms_of(297),
              ms_of(297) + 1, ms_of(1000), 0):
        assert rc.execute_command("STREAMDB.GROUP", "SETID", "s", "g", "TIME", t) == b"OK"
        g = rc.xinfo_groups("s")[0]
        before = rc.xrange("s", "-", f"{t - 1}-18446744073709551615" if t else "0-0")
        assert g["last-delivered-id"] == (before[-1][0] if before else b"0-0"), t
        assert g["entries-read"] == len(before), t
        assert g["lag"] == 100 - len(before), t
    # From a reset, reading on and adding on keep XINFO's lag exact.
    rc.execute_command("STREAMDB.GROUP", "SETID", "s", "g", "TIME", ms_of(150))
    rc.xreadgroup("g", "c", {"s": ">"}, count=7)
    fill(rc, "s", range(300, 320))
    g = rc.xinfo_groups("s")[0]
    assert g["lag"] == entries_after(rc, "s", g["last-delivered-id"]) == 100 - 50 - 7 + 20
    assert g["entries-read"] == len(rc.xrange("s", "-", g["last-delivered-id"]))
    rc.xreadgroup("g", "c", {"s": ">"})
    assert rc.xinfo_groups("s")[0]["lag"] == 0


def test_reset_after_deletions_and_trims_keeps_the_lag_exact(rc):
    fill(rc, "s", range(200))
    rc.xgroup_create("s", "g", id="0")
    rc.xtrim("s", minid=sid(35))                         # 35 trimmed, mid-node
    rc.xdel("s", *[sid(i) for i in (40, 41, 42, 77, 78)])
    rc.xreadgroup("g", "c", {"s": ">"}, count=3)
    pending = rc.xpending("s", "g")["pending"]
    rc.execute_command("STREAMDB.GROUP", "SETID", "s", "g", "TIME", ms_of(120))
    g = rc.xinfo_groups("s")[0]
    assert g["last-delivered-id"] == sid(119)
    # entries-read: every entry up to the id, the deleted and trimmed ones counted as read,
    # so that entries-added minus it is what is left to read.
    assert g["entries-read"] == 200 - entries_after(rc, "s", sid(119)) == 120
    assert g["lag"] == entries_after(rc, "s", sid(119)) == 80
    assert rc.xpending("s", "g")["pending"] == pending   # pending entries stay
    fill(rc, "s", range(200, 230))
    rc.xreadgroup("g", "c", {"s": ">"}, count=11)
    g = rc.xinfo_groups("s")[0]
    assert g["lag"] == entries_after(rc, "s", g["last-delivered-id"]) == 80 + 30 - 11
    # EARLIEST: everything left is still to read; LATEST: nothing.
    rc.execute_command("STREAMDB.GROUP", "SETID", "s", "g", "EARLIEST")
    info = assert_time_lag(rc, "s", "g")
    assert info[b"last-delivered-id"] == b"0-0"
    rc.execute_command("STREAMDB.GROUP", "SETID", "s", "g", "LATEST")
    info = assert_time_lag(rc, "s", "g")
    assert (info[b"last-delivered-id"], info[b"lag"], info[b"lag-ms"]) == (sid(229), 0, 0)
    # A time after the end is the end, also when the last entry was deleted: no deleted
    # entry lies ahead, so the lag is still counted.
    rc.xdel("s", sid(229))
    rc.execute_command("STREAMDB.GROUP", "SETID", "s", "g", "TIME", ms_of(500))
    info = assert_time_lag(rc, "s", "g")
    assert (info[b"last-delivered-id"], info[b"lag"], info[b"lag-ms"]) == (sid(229), 0, 0)


def test_earliest_on_an_untouched_stream_and_latest_as_setid_dollar(rc):
    fill(rc, "s", range(25))
    rc.xgroup_create("s", "g", id="$")
    rc.xgroup_create("s", "h", id="$")
    rc.execute_command("STREAMDB.GROUP", "SETID", "s", "g", "EARLIEST")
    g = rc.xinfo_groups("s")[0]
    assert (g["last-delivered-id"], g["entries-read"], g["lag"]) == (b"0-0", 0, 25)
    rc.execute_command("STREAMDB.GROUP", "SETID", "s", "g", "LATEST")
    rc.xgroup_setid("s", "h", id="$", entries_read=25)
    g, h = rc.xinfo_groups("s")
    assert {k: v for k, v in g.items() if k != "name"} == {k: v for k, v in h.items() if k != "name"}


@pytest.mark.parametrize("args, error", [
    (("SETID", "nokey", "g", "LATEST"), "no such key 'nokey'"),
    (("INFO", "nokey", "g"), "no such key 'nokey'"),
    (("SETID", "s", "nogroup", "EARLIEST"), "NOGROUP No such consumer group 'nogroup' for key name 's'"),
    (("INFO", "s", "nogroup"), "NOGROUP No such consumer group 'nogroup' for key name 's'"),
    (("SETID", "s", "g", "TIME", "9am"), "TIME must be a unix time in milliseconds (an integer >= 0), not '9am'"),
    (("SETID", "s", "g", "TIME", "-5"), "TIME must be a unix time in milliseconds (an integer >= 0), not '-5'"),
    (("SETID", "s", "g", "TIME"), "syntax error"),
    (("SETID", "s", "g", "YESTERDAY"), "syntax error"),
    (("SETID", "s", "g", "LATEST", "NOW"), "syntax error"),
    (("SETID", "str", "g", "LATEST"), "WRONGTYPE"),
])
def test_errors_say_what_is_wrong(rc, args, error):
    fill(rc, "s", range(3))
    rc.xgroup_create("s", "g", id="0")
    rc.set("str", "x")
    with pytest.raises(redis.ResponseError) as e:
        rc.execute_command("STREAMDB.GROUP", *args)
    assert error in str(e.value)
    assert rc.ping()


# ---------------------------------------------------------------------------
# Propagation: a replica and AOF replay end with the same group
# ---------------------------------------------------------------------------


def test_a_replica_and_aof_replay_give_the_same_group(tmp_path):
    # No stream cache on the primary: its own snapshots would move the AOF on to new
    # segments, and the test reads the effects in the one it writes.
    primary, replica = primary_and_replica(tmp_path, "--stream-cache-size", "0")
    try:
        p, rep = client(primary), client(replica)
        fill(p, "s", range(100))
        p.xgroup_create("s", "g", id="0")
        p.xreadgroup("g", "c", {"s": ">"}, count=30)
        p.xdel("s", sid(60))
        p.xtrim("s", minid=sid(10))
        p.execute_command("STREAMDB.GROUP", "SETID", "s", "g", "TIME", ms_of(70))
        p.xgroup_create("s", "h", id="$")
        p.execute_command("STREAMDB.GROUP", "SETID", "s", "h", "EARLIEST")
        p.xgroup_create("s", "k", id="0")
        p.execute_command("STREAMDB.GROUP", "SETID", "s", "k", "LATEST")
        groups = p.xinfo_groups("s")
        wait_synced(p, rep)
        assert rep.xinfo_groups("s") == groups
        with pytest.raises(redis.exceptions.ReadOnlyError):
            rep.execute_command("STREAMDB.GROUP", "SETID", "s", "g", "LATEST")
        p = killed_and_replayed(primary, p)    # AOF replay only (no snapshot)
        assert p.xinfo_groups("s") == groups
        aof = b"".join(f.read_bytes() for f in (tmp_path / "p" / "appendonlydir").glob("*.incr.aof"))
        assert b"STREAMDB.GROUP" not in aof.upper()      # plain XGROUP SETID effects
        assert aof.count(b"ENTRIESREAD") >= 3
        p.close()
        rep.close()
    finally:
        replica.stop()
        primary.stop()


# ---------------------------------------------------------------------------
# The metrics endpoint
# ---------------------------------------------------------------------------


def test_metrics_export_time_lag_and_oldest_pending_per_group(tmp_path):
    metrics_port = free_port()
    srv = start(tmp_path / "m", "--appendonly", "no", "--metrics-port", str(metrics_port))
    try:
        r = client(srv)
        fill(r, "orders", range(40))
        r.xgroup_create("orders", "billing", id="0")
        r.xreadgroup("billing", "w", {"orders": ">"}, count=12)
        r.xack("orders", "billing", *[sid(i) for i in range(3)])
        r.xgroup_create("orders", "done", id="$")
        before = time.time()
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        after = time.time() + 0.002
        samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                   for line in text.splitlines() if line.startswith("streamdb_stream_group_")}
        labels = '{db="0",stream="orders",group="%s"}'
        lag = samples["streamdb_stream_group_lag_seconds" + labels % "billing"]
        assert before - ms_of(12) / 1000 - 0.001 <= lag <= after - ms_of(12) / 1000
        oldest = samples["streamdb_stream_group_oldest_pending_seconds" + labels % "billing"]
        assert before - ms_of(3) / 1000 - 0.001 <= oldest <= after - ms_of(3) / 1000
        assert samples["streamdb_stream_group_lag_seconds" + labels % "done"] == 0
        assert samples["streamdb_stream_group_oldest_pending_seconds" + labels % "done"] == 0
        assert "# TYPE streamdb_stream_group_lag_seconds gauge" in text
        r.close()
    finally:
        srv.stop()


# ---------------------------------------------------------------------------
# streamdb-admin group info / reset, and the operations guide
# ---------------------------------------------------------------------------


def admin(port: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streamdb.cli.admin", "-p", str(port), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_admin_group_reset_and_info(srv, rc):
    fill(rc, "s", range(50))
    rc.xgroup_create("s", "g", id="$")
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms_of(20) / 1000))
    done = admin(srv.port, "group", "reset", "s", "g", "--to-time", when)
    assert done.returncode == 0, done.stderr
    assert f"now reads after {sid(19).decode()}: 30 entries to read, entries-read 20" in done.stdout
    # The same instant written with an offset.
    local = time.strftime("%Y-%m-%dT%H:%M:%S+02:00", time.gmtime(ms_of(20) / 1000 + 7200))
    assert admin(srv.port, "group", "reset", "s", "g", "--to-time", local).returncode == 0
    assert rc.xinfo_groups("s")[0]["last-delivered-id"] == sid(19)
    assert admin(srv.port, "group", "reset", "s", "g", "--latest").returncode == 0
    assert rc.xinfo_groups("s")[0]["lag"] == 0
    assert admin(srv.port, "group", "reset", "s", "g", "--earliest").returncode == 0
    assert rc.xinfo_groups("s")[0]["lag"] == 50
    shown = admin(srv.port, "group", "info", "s", "g")
    assert shown.returncode == 0 and "lag-ms" in shown.stdout and "oldest-pending-ms" in shown.stdout
    # Errors: one line, no traceback.
    naive = admin(srv.port, "group", "reset", "s", "g", "--to-time", "2026-11-27T09:00:00")
    assert naive.returncode == 2 and "has no time zone" in naive.stderr
    bad = admin(srv.port, "group", "reset", "s", "g", "--to-time", "9am")
    assert bad.returncode == 2 and "not an ISO 8601 time" in bad.stderr
    missing = admin(srv.port, "group", "reset", "s", "nogroup", "--latest")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "error: NOGROUP No such consumer group 'nogroup' for key name 's'"
    for run in (naive, bad, missing):
        assert "Traceback" not in run.stderr


def test_the_operations_guide_group_block(srv, rc):
    for i in range(30):
        rc.xadd("sensor:0", {"temperature": "19.5"})
    rc.xgroup_create("sensor:0", "alerts", id="0")
    rc.xreadgroup("alerts", "w1", {"sensor:0": ">"}, count=5)
    out = run_block("docs/OPERATIONS.md", "group-time", cwd=ROOT, PORT=srv.port)
    assert "lag-ms" in out and "oldest-pending-ms" in out
    # Reset to an hour ago: every entry (added just now) is to be read again.
    g = rc.xinfo_groups("sensor:0")[0]
    assert (g["last-delivered-id"], g["entries-read"], g["lag"]) == (b"0-0", 0, 30)
    assert rc.xpending("sensor:0", "alerts")["pending"] == 5
