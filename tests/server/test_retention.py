"""Stream retention on real server processes: STREAMDB.RETENTION, the stream-retention-*
defaults, the background trims (by age, by size, the ACKED rule), their propagation to
replicas and the AOF, and the policy as part of the stream's state.

Retention runs from the server's tick, so tests wait (bounded) for its effect rather
than for a time.  Entries are added with explicit ids in the distant past where a
test needs them old: an id's milliseconds are what the age rule reads.
"""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest
import redis

from docblocks import run_block
from helpers import ROOT, ServerProcess, wait_until
from resp_raw import RawClient
from streamdb.cli.procs import free_port

NODE = 10           # stream-node-max-entries in these tests
DOC_BLOCKS = {"docs/OPERATIONS.md": {"retention"}}


def client(srv) -> redis.Redis:
    return redis.Redis(port=srv.port, decode_responses=False, socket_timeout=10)


def start(path, *args: str) -> ServerProcess:
    return ServerProcess(path, "--save", "", "--hz", "50", "--stream-node-max-entries",
                         str(NODE), *args).start()


def add_old(r, key: str, count: int, start_ms: int = 1000, value: bytes = b"v") -> None:
    """``count`` entries at ms start_ms, start_ms + 1, ... (long past: old for any max age)."""
    pipe = r.pipeline(transaction=False)
    for i in range(count):
        pipe.xadd(key, {"f": value}, id=f"{start_ms + i}-0")
    pipe.execute()


def policy(r, key: str) -> dict:
    reply = r.execute_command("STREAMDB.RETENTION", "GET", key)
    # (A map under RESP3, a flat array under RESP2: redis-py gives either as it was sent.)
    return reply if isinstance(reply, dict) else dict(zip(reply[0::2], reply[1::2]))


@pytest.fixture
def srv(tmp_path):
    s = start(tmp_path / "sdb", "--appendonly", "no")
    yield s
    s.stop()


@pytest.fixture
def rc(srv):
    c = client(srv)
    yield c
    c.close()


# ---------------------------------------------------------------------------
# Age, size, ACKED
# ---------------------------------------------------------------------------


def test_age_retention_drops_whole_old_nodes_and_keeps_the_last_node(rc):
    add_old(rc, "s", 95)                       # 10 nodes, the last holding 5 entries
    assert rc.execute_command("STREAMDB.RETENTION", "SET", "s", "MAXAGE", 60_000) == b"OK"
    # Every entry is long past the max age, but the stream's last node stays:
    # retention never empties a stream (the node XADD appends to is kept).
    wait_until(lambda: rc.xlen("s") == 5, what="age retention")
    assert rc.xrange("s", count=1)[0][0] == b"1090-0"
    got = policy(rc, "s")
    assert got[b"trimmed-entries"] == 90 and got[b"trimmed-nodes"] == 9
    assert got[b"max-age"] == 60_000 and got[b"own-settings"] == [b"MAXAGE", b"60000"]
    assert rc.info("stats")["stream_retention_trimmed_entries"] == 90
    # Fresh entries (ids of now) are not old: they stay.
    for _ in range(30):
        rc.xadd("s", {"f": "v"})
    add_old(rc, "canary", 30)                  # trimmed by the tick that also visits "s"
    rc.execute_command("STREAMDB.RETENTION", "SET", "canary", "MAXAGE", 60_000)
    wait_until(lambda: rc.xlen("canary") == NODE, what="retention of the canary")
    assert rc.xlen("s") == 35


def test_size_retention_keeps_the_stream_within_max_bytes_by_whole_nodes(rc):
    add_old(rc, "big", 100, value=b"x" * 100)  # 10 nodes of about 1.1 KB
    rc.execute_command("STREAMDB.RETENTION", "SET", "big", "MAXBYTES", 5000)
    wait_until(lambda: rc.xlen("big") == 40, what="size retention to 4 nodes")
    assert rc.xrange("big", count=1)[0][0] == b"1060-0"
    # MAXBYTES 0 on the stream means no limit even when the server's default has one.
    rc.config_set("stream-retention-max-bytes", "1")
    add_old(rc, "other", 30, start_ms=5000)
    rc.execute_command("STREAMDB.RETENTION", "SET", "big", "MAXBYTES", 0)
    add_old(rc, "big", 30, start_ms=2000)
    wait_until(lambda: rc.xlen("other") == NODE, what="the server default on 'other'")
    assert rc.xlen("big") == 70
    assert policy(rc, "other")[b"max-bytes"] == 1
    assert policy(rc, "other")[b"own-settings"] == []


def test_acked_keeps_what_a_group_has_not_read_and_acknowledged(rc):
    add_old(rc, "s", 60)
    add_old(rc, "canary", 30)                 # no groups: shows that a tick has passed
    rc.xgroup_create("s", "g", id="0")
    rc.xreadgroup("g", "c", {"s": ">"}, count=30)          # 1000..1029 delivered
    rc.xack("s", "g", *[f"{1000 + i}-0" for i in range(15)])   # 1015.. still pending
    rc.xgroup_create("s", "late", id="0")                  # has read nothing
    rc.config_set("stream-retention-acked", "yes")
    rc.config_set("stream-retention-max-age", "1")
    wait_until(lambda: rc.xlen("canary") == NODE, what="retention of the canary")
    assert rc.xlen("s") == 60                  # 'late' has read nothing: all stays
    assert policy(rc, "s")[b"acked"] == 1
    rc.xgroup_destroy("s", "late")
    # 'g' has 1015 pending: the first node (1000-1009) goes, the one holding 1015 stays.
    wait_until(lambda: rc.xlen("s") == 50, what="ACKED-bounded trim")
    rc.xack("s", "g", *[f"{1000 + i}-0" for i in range(15, 30)])
    wait_until(lambda: rc.xlen("s") == 30, what="trim up to the group's last delivered id")
    # NOACKED on the stream wins over the server's ACKED default.
    rc.execute_command("STREAMDB.RETENTION", "SET", "s", "NOACKED")
    wait_until(lambda: rc.xlen("s") == NODE, what="NOACKED trim")
    assert rc.xpending("s", "g")["pending"] == 0


# ---------------------------------------------------------------------------
# Replicas, the AOF, restart, and the policy as part of the stream's state
# ---------------------------------------------------------------------------


def primary_and_replica(tmp_path, *primary_args: str) -> tuple[ServerProcess, ServerProcess]:
    """A primary with an AOF (appendfsync always) and a replica of it without one."""
    primary = start(tmp_path / "p", "--appendonly", "yes", "--appendfsync", "always",
                    *primary_args)
    replica = start(tmp_path / "r", "--appendonly", "no", "--replicaof", "127.0.0.1",
                    str(primary.port))
    return primary, replica


def wait_synced(p: redis.Redis, rep: redis.Redis) -> None:
    """Until the replica has all the primary wrote and their DEBUG DIGESTs are equal."""
    def synced():
        off = p.info("replication")["master_repl_offset"]
        return rep.info("replication").get("slave_repl_offset", -1) >= off and \
            p.execute_command("DEBUG", "DIGEST") == rep.execute_command("DEBUG", "DIGEST")
    wait_until(synced, what="replica with the primary's digest")


def killed_and_replayed(primary: ServerProcess, p: redis.Redis) -> redis.Redis:
    """kill -9 the primary and start it again from its files; its DEBUG DIGEST must be
    what it was.  Returns a client of the restarted server (``p`` is closed)."""
    digest = p.execute_command("DEBUG", "DIGEST")
    p.close()
    primary.kill9()
    primary.start()
    p = client(primary)
    assert p.execute_command("DEBUG", "DIGEST") == digest
    return p


def test_replica_and_aof_replay_end_identical_and_the_policy_survives_restart(tmp_path):
    primary, replica = primary_and_replica(tmp_path)
    try:
        p, rep = client(primary), client(replica)
        add_old(p, "s", 200)
        p.xgroup_create("s", "g", id="0")
        p.xreadgroup("g", "c", {"s": ">"}, count=120)
        p.xack("s", "g", *[f"{1000 + i}-0" for i in range(95)])
        p.execute_command("STREAMDB.RETENTION", "SET", "s", "MAXAGE", 1, "ACKED")
        wait_until(lambda: p.xlen("s") == 110, what="retention on the primary")
        wait_synced(p, rep)
        assert rep.xlen("s") == 110
        # The replica applies the primary's trims and runs none of its own.
        assert rep.info("stats")["stream_retention_trimmed_entries"] == 0
        assert policy(rep, "s")[b"own-settings"] == [b"MAXAGE", b"1", b"ACKED"]
        with pytest.raises(redis.exceptions.ReadOnlyError):
            rep.execute_command("STREAMDB.RETENTION", "SET", "s", "MAXAGE", 5)
        digest = p.execute_command("DEBUG", "DIGEST")
        p = killed_and_replayed(primary, p)    # AOF replay only (no snapshot)
        assert policy(p, "s")[b"own-settings"] == [b"MAXAGE", b"1", b"ACKED"]
        # After BGREWRITEAOF the policy is in the base (a RESTORE payload).
        p.execute_command("BGREWRITEAOF")
        wait_until(lambda: p.info("persistence")["aof_rewrite_in_progress"] == 0,
                   what="AOF rewrite")
        p.close()
        primary.kill9()
        primary.start()
        p = client(primary)
        assert p.execute_command("DEBUG", "DIGEST") == digest
        assert policy(p, "s")[b"max-age"] == 1
        # And from a snapshot (it covers the whole AOF so far).
        def bgsave_started():      # (a node cache's own snapshot may be running: wait it out)
            try:
                return p.execute_command("BGSAVE")
            except redis.exceptions.ResponseError as e:
                assert "already in progress" in str(e)
                return False

        wait_until(bgsave_started, what="BGSAVE to start")
        wait_until(lambda: p.info("persistence")["rdb_bgsave_in_progress"] == 0 and
                   p.info("persistence")["rdb_last_bgsave_status"] == "ok", what="snapshot")
        p.close()
        primary.kill9()
        primary.start()
        p = client(primary)
        assert p.execute_command("DEBUG", "DIGEST") == digest
        assert policy(p, "s")[b"own-settings"] == [b"MAXAGE", b"1", b"ACKED"]
        p.close()
        rep.close()
    finally:
        replica.stop()
        primary.stop()


def test_the_policy_follows_rename_copy_dump_restore_and_del_drops_it(rc):
    add_old(rc, "a", 5)
    rc.execute_command("STREAMDB.RETENTION", "SET", "a", "MAXAGE", 7, "MAXBYTES", 9, "ACKED")
    own = [b"MAXAGE", b"7", b"MAXBYTES", b"9", b"ACKED"]
    rc.rename("a", "b")
    assert policy(rc, "b")[b"own-settings"] == own
    rc.copy("b", "c")
    assert policy(rc, "c")[b"own-settings"] == own
    rc.restore("d", 0, rc.dump("b"))
    assert policy(rc, "d")[b"own-settings"] == own
    assert rc.execute_command("STREAMDB.RETENTION", "RESET", "d") == b"OK"
    assert policy(rc, "d")[b"own-settings"] == []
    assert policy(rc, "c")[b"own-settings"] == own
    rc.delete("b")
    add_old(rc, "b", 1)
    assert policy(rc, "b")[b"own-settings"] == []


def test_get_is_a_map_under_resp3(srv):
    r3 = redis.Redis(port=srv.port, protocol=3, decode_responses=False)
    try:
        r3.xadd("s", {"f": "v"})
        got = r3.execute_command("STREAMDB.RETENTION", "GET", "s")
        assert got == {b"max-age": 0, b"max-bytes": 0, b"acked": 0, b"own-settings": [],
                       b"trimmed-entries": 0, b"trimmed-nodes": 0, b"bytes": 20,
                       b"resident-bytes": 20}
    finally:
        r3.close()


@pytest.mark.parametrize("args, error", [
    (["SET", "str", "MAXAGE", "1"], "WRONGTYPE Operation against a key holding the wrong kind of value"),
    (["GET", "str"], "WRONGTYPE Operation against a key holding the wrong kind of value"),
    (["SET", "nokey", "MAXAGE", "1"], "ERR no such key"),
    (["GET", "nokey"], "ERR no such key"),
    (["SET", "s", "MAXAGE", "-1"], "ERR MAXAGE must be >= 0"),
    (["SET", "s", "MAXBYTES", "-5"], "ERR MAXBYTES must be >= 0"),
    (["SET", "s", "MAXAGE", "soon"], "ERR value is not an integer or out of range"),
    (["SET", "s", "MAXBYTES", "lots"], "ERR MAXBYTES must be a byte count, optionally with a unit (kb, mb, gb)"),
    (["SET", "s", "MAXAGE"], "ERR syntax error"),
    (["SET", "s", "FOREVER"], "ERR syntax error"),
    (["SET", "s", "ACKED", "NOACKED"], "ERR syntax error"),
    (["SET", "s"], "ERR wrong number of arguments for 'streamdb.retention|set' command"),
    (["GET"], "ERR wrong number of arguments for 'streamdb.retention|get' command"),
    (["GET", "s", "extra"], "ERR wrong number of arguments for 'streamdb.retention|get' command"),
    (["RESET"], "ERR wrong number of arguments for 'streamdb.retention|reset' command"),
    (["PURGE", "s"], "ERR unknown subcommand 'PURGE'. Try STREAMDB.RETENTION HELP."),
    ([], "ERR wrong number of arguments for 'streamdb.retention' command"),
])
def test_bad_arguments_give_clear_errors(srv, rc, args, error):
    rc.set("str", "x")
    rc.xadd("s", {"f": "v"})
    raw = RawClient(srv.port)
    try:
        assert raw.call("STREAMDB.RETENTION", *args) == (b"-", error.encode())
    finally:
        raw.close()


def test_maxbytes_takes_the_units_the_directive_takes(rc):
    rc.xadd("s", {"f": "v"})
    for given, stored in (("5mb", 5 * 1024 * 1024), ("64kb", 64 * 1024), ("1g", 1000 ** 3), ("1gb", 1024 ** 3), ("4096", 4096)):
        assert rc.execute_command("STREAMDB.RETENTION", "SET", "s", "MAXBYTES", given) == b"OK"
        reply = rc.execute_command("STREAMDB.RETENTION", "GET", "s")
        fields = dict(zip(reply[::2], reply[1::2])) if isinstance(reply, list) else reply
        assert fields[b"max-bytes"] == stored


def test_bad_server_defaults_are_refused(rc):
    with pytest.raises(redis.ResponseError):
        rc.config_set("stream-retention-max-age", "-1")
    with pytest.raises(redis.ResponseError):
        rc.config_set("stream-retention-acked", "maybe")
    rc.config_set("stream-retention-max-bytes", "1mb")
    assert rc.config_get("stream-retention-*") == {
        "stream-retention-max-age": "0", "stream-retention-max-bytes": "1048576",
        "stream-retention-acked": "no"}


# ---------------------------------------------------------------------------
# Under load: writers, consumer groups reading and acknowledging, ACKED retention
# ---------------------------------------------------------------------------


def test_retention_under_write_load_with_consumer_groups_reading(srv, rc):
    total = 3000
    rc.xgroup_create("load", "g1", id="$", mkstream=True)
    rc.xgroup_create("load", "g2", id="$")
    rc.execute_command("STREAMDB.RETENTION", "SET", "load", "MAXAGE", 50, "ACKED")
    errors: list[BaseException] = []
    seen: dict[str, list[bytes]] = {"g1": [], "g2": []}
    added: list[bytes] = []

    def writer():
        w = client(srv)
        try:
            for i in range(0, total, 50):
                pipe = w.pipeline(transaction=False)
                for j in range(i, i + 50):
                    pipe.xadd("load", {"n": str(j)})
                added.extend(pipe.execute())
        except BaseException as e:      # surfaced by the assertion below
            errors.append(e)
        finally:
            w.close()

    def consumer(group: str):
        c = client(srv)
        try:
            deadline = time.monotonic() + 60
            while len(seen[group]) < total and time.monotonic() < deadline:
                got = c.xreadgroup(group, "c", {"load": ">"}, count=100, block=100)
                for _, entries in got or []:
                    ids = [sid for sid, _ in entries]
                    seen[group].extend(ids)
                    if ids:
                        c.xack("load", group, *ids)
        except BaseException as e:
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=writer)] + \
        [threading.Thread(target=consumer, args=(g,)) for g in seen]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not errors, errors
    # ACKED: no entry went before both groups had read and acknowledged it.
    assert seen["g1"] == added and seen["g2"] == added
    wait_until(lambda: rc.xlen("load") <= NODE, what="retention to catch up")
    got = policy(rc, "load")
    assert got[b"trimmed-entries"] == total - rc.xlen("load")
    assert rc.xinfo_stream("load")["entries-added"] == total


def test_a_trim_logs_one_line_per_stream_per_tick_and_get_shows_the_bytes_left(tmp_path):
    srv = start(tmp_path / "log", "--appendonly", "no", "--loglevel", "verbose")
    try:
        rc = client(srv)
        add_old(rc, "few", 95)                    # 9 nodes go: one tick
        add_old(rc, "many", 1000)                 # 99 nodes go: 64 a tick at most, two ticks
        before = policy(rc, "many")[b"bytes"]
        for key in ("few", "many"):
            rc.execute_command("STREAMDB.RETENTION", "SET", key, "MAXAGE", 60_000, "ACKED")
        wait_until(lambda: rc.xlen("few") == 5 and rc.xlen("many") == NODE, what="age retention")
        lines = [line for line in srv.log_text().splitlines() if "Retention removed" in line]
        few = [line for line in lines if "'few'" in line]
        many = [line for line in lines if "'many'" in line]
        assert len(few) == 1 and " - Retention removed 90 entries (9 nodes) of stream 'few' in db 0 " \
            "(max-age 60000 ms, acked); it now starts at 1090-0" in few[0]
        # A backlog is a line a tick, not a line a node.
        assert len(many) == 2
        assert sum(int(line.split("Retention removed ")[1].split()[0]) for line in many) == 990
        assert many[-1].endswith("it now starts at 1990-0")
        # GET's bytes are what the stream keeps now: its last node's.
        left = policy(rc, "many")
        assert left[b"bytes"] == left[b"resident-bytes"] and 0 < left[b"bytes"] < before // 50
        rc.close()
    finally:
        srv.stop()


# ---------------------------------------------------------------------------
# docs/OPERATIONS.md, "Retention", as written
# ---------------------------------------------------------------------------


def test_the_operations_guide_retention_block(srv, rc):
    add_old(rc, "sensor:0", 35)
    out = run_block("docs/OPERATIONS.md", "retention", cwd=ROOT, PORT=srv.port)
    assert out.splitlines()[:2] == ["OK", "OK"]
    assert "own-settings" in out and "1073741824" in out
    assert "stream_retention_trimmed_entries:" in out
    # The ids of 1970 are older than a day: all but the last node go.
    wait_until(lambda: rc.xlen("sensor:0") == 5, what="the guide's policy to apply")
    assert rc.config_get("stream-retention-max-age") == {
        "stream-retention-max-age": "604800000"}


def test_info_and_the_metrics_endpoint_count_retention_trims(tmp_path):
    metrics_port = free_port()
    srv = start(tmp_path / "m", "--appendonly", "no", "--metrics-port", str(metrics_port))
    try:
        rc = client(srv)
        add_old(rc, "m:s", 50)
        add_old(rc, "m:other", 5)
        rc.config_set("stream-retention-max-age", "1")
        wait_until(lambda: rc.xlen("m:s") == NODE, what="retention")
        assert rc.info("stats")["stream_retention_trimmed_entries"] == 40
        assert rc.info("stats")["stream_retention_trimmed_nodes"] == 4
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        assert "\nstreamdb_retention_trimmed_entries_total 40\n" in text
        assert '\nstreamdb_stream_retention_trimmed_entries_total{db="0",key="m:s"} 40\n' in text
        assert 'retention_trimmed_entries_total{db="0",key="m:other"}' not in text
        rc.close()
    finally:
        srv.stop()
