"""Streams move between Redis and StreamDB: Redis's DUMP payloads and dump.rdb files.

The payloads and files are made by the real redis-server (7.0: RDB version 10,
streams as type 19, strings LZF-compressed); a value restored on the other server
must answer every read the same (XRANGE, XINFO STREAM FULL, XINFO GROUPS and
CONSUMERS, XPENDING), but for the times that are relative to now (idle,
inactive) and the field Redis 7.0 does not have (a consumer's active-time).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from differential.machine import LATER_REDIS_FIELDS
from differential.resp import Err, RawClient, Status
from helpers import ROOT, ServerProcess, wait_until
from streamdb.persistence import rdb

# The reply fields that hold times relative to now, that Redis 7.0 lacks (its later
# releases added them), or that count the inner nodes of Redis's radix tree.
VOLATILE = {b"idle", b"radix-tree-nodes"} | LATER_REDIS_FIELDS


def _strip(reply):
    """A reply without its VOLATILE fields (flat key-value lists lose the pair)."""
    if isinstance(reply, list):
        if len(reply) % 2 == 0 and any(isinstance(k, bytes) and k in VOLATILE
                                       for k in reply[0::2]):
            out = []
            for k, v in zip(reply[0::2], reply[1::2]):
                if k not in VOLATILE:
                    out += [k, _strip(v)]
            return out
        return [_strip(x) for x in reply]
    return reply


def reads(client: RawClient, key: str) -> list:
    """Every read of a stream whose reply must be the same on both servers."""
    out = [client.call("XRANGE", key, "-", "+"), client.call("XLEN", key),
           _strip(client.call("XINFO", "STREAM", key, "FULL"))]
    groups = client.call("XINFO", "GROUPS", key)
    out.append(groups)
    for g in groups:
        name = dict(zip(g[0::2], g[1::2]))[b"name"]
        out.append(_strip(client.call("XINFO", "CONSUMERS", key, name)))
        out.append(client.call("XPENDING", key, name))
        # Extended form: id, consumer, idle (relative: dropped), deliveries.
        out.append([[p[0], p[1], p[3]] for p in client.call("XPENDING", key, name, "-", "+", "1000")])
    return out


def make_redis_streams(r: redis.Redis) -> list[str]:
    """Streams on redis-server with what a migration meets; returns their keys."""
    r.config_set("stream-node-max-entries", 5)
    big = "payload-" + "abcdefgh" * 20           # over 20 bytes and compressible: LZF
    for i in range(40):
        fields = {"kind": "tick", "n": i, "neg": -70000 * i, "big": big + str(i)}
        if i % 9 == 4:
            fields = {"other": "shape", "n": i}  # not the master fields
        r.xadd("mig:orders", fields, id=f"{1000 + i // 3}-{i % 3}")
    ids = [e[0] for e in r.xrange("mig:orders")]
    r.xdel("mig:orders", ids[7], ids[12], ids[13], ids[38])
    r.xtrim("mig:orders", maxlen=30, approximate=False)    # marks the head node's entries
    r.xgroup_create("mig:orders", "billing", "0")
    r.xreadgroup("billing", "alice", {"mig:orders": ">"}, count=6)
    r.xreadgroup("billing", "bob", {"mig:orders": ">"}, count=4)
    r.xack("mig:orders", "billing", ids[18])
    r.xclaim("mig:orders", "billing", "carol", 0, [ids[20]])    # a second delivery
    r.xgroup_create("mig:orders", "audit", "$", entries_read=None)
    r.xgroup_create("mig:orders", "late", ids[25])
    r.xgroup_createconsumer("mig:orders", "late", "idle-one")
    r.xadd("mig:small", {"a": "1"}, id="5-1")
    r.xadd("mig:empty", {"a": "1"}, id="7-7")
    r.xdel("mig:empty", "7-7")                                   # length 0, last id kept
    r.xgroup_create("mig:empty", "g", "$")
    return ["mig:orders", "mig:small", "mig:empty"]


@pytest.fixture
def both(redis_server, fresh_server):
    rc = redis.Redis(port=redis_server.port)
    rc.flushall()
    # redis-server checks every payload StreamDB sends it in depth (each listpack entry,
    # each PEL entry's owner), not only its frame.
    rc.config_set("sanitize-dump-payload", "yes")
    yield rc, redis.Redis(port=fresh_server.port), RawClient(redis_server.port), \
        RawClient(fresh_server.port), fresh_server
    rc.config_set("sanitize-dump-payload", "no")
    rc.config_set("stream-node-max-entries", 100)
    rc.flushall()


def test_crc64_is_redis():
    assert rdb.crc64(b"123456789") == 0xE9C6D914C4B8D9CA


@pytest.mark.differential
def test_restore_of_redis_dump_payloads(both):
    """Redis DUMP -> StreamDB RESTORE: the same stream, groups and strings."""
    rc, sc, raw_r, raw_s, _ = both
    keys = make_redis_streams(rc)
    rc.set("mig:text", "compress me " * 20)
    rc.set("mig:int", 123456)
    rc.set("mig:neg", -42)
    for key in keys + ["mig:text", "mig:int", "mig:neg"]:
        payload = rc.dump(key)
        assert payload[-10:-8] == b"\x0a\x00"                 # RDB version 10: Redis 7.0
        assert sc.restore(key, 0, payload)
    for key in keys:
        assert reads(raw_s, key) == reads(raw_r, key), key
    for key in ("mig:text", "mig:int", "mig:neg"):
        assert sc.get(key) == rc.get(key)
    # What the restored stream does next is what Redis does next.
    for c in (raw_r, raw_s):
        c.call("XADD", "mig:orders", "MAXLEN", "~", "12", "*", "k", "v")
        c.call("XREADGROUP", "GROUP", "late", "zed", "COUNT", "3", "STREAMS", "mig:orders", ">")
    assert [len(x) if isinstance(x, list) else x for x in
            (raw_s.call("XINFO", "GROUPS", "mig:orders"))] == \
        [len(x) if isinstance(x, list) else x for x in raw_r.call("XINFO", "GROUPS", "mig:orders")]
    assert raw_s.call("XLEN", "mig:orders") == raw_r.call("XLEN", "mig:orders")


@pytest.mark.differential
def test_dump_in_redis_form_restores_on_redis(both):
    """StreamDB DUMP (dump-payload-format redis) -> redis-server RESTORE: the same replies."""
    rc, sc, raw_r, raw_s, _ = both
    keys = make_redis_streams(rc)
    for key in keys:
        sc.restore(key, 0, rc.dump(key))
    sc.set("mig:text", "hello " * 30)
    assert sc.config_get("dump-payload-format") == {"dump-payload-format": "streamdb"}
    assert sc.dump("mig:small").startswith(b"SDB2")                   # the default: our own
    sc.config_set("dump-payload-format", "redis")
    for key in keys:
        rc.restore(key + ":back", 0, sc.dump(key))
        assert reads(raw_r, key + ":back") == reads(raw_s, key), key
    rc.restore("mig:text:back", 0, sc.dump("mig:text"))
    assert rc.get("mig:text:back") == sc.get("mig:text")
    # A stream StreamDB made itself (its own node sizes) goes over too.
    for i in range(300):
        sc.xadd("mig:own", {"i": i, "pad": "x" * (i % 50)})
    sc.xgroup_create("mig:own", "g", "0")
    sc.xreadgroup("g", "c", {"mig:own": ">"}, count=50)
    rc.restore("mig:own", 0, sc.dump("mig:own"))
    assert reads(raw_r, "mig:own") == reads(raw_s, "mig:own")


@pytest.mark.differential
def test_damaged_redis_payloads_get_redis_errors(both):
    rc, sc, raw_r, raw_s, srv = both
    make_redis_streams(rc)
    payload = rc.dump("mig:orders")
    flipped = payload[:20] + bytes([payload[20] ^ 1]) + payload[21:]
    newer = payload[:-10] + (99).to_bytes(2, "little")
    newer += rdb.crc64(newer).to_bytes(8, "little")
    for bad in (flipped, newer, b"", b"\x00" * 5):
        assert raw_s.call("RESTORE", "k", "0", bad) == raw_r.call("RESTORE", "k", "0", bad) == \
            Err("ERR DUMP payload version or checksum are wrong")
    # Checksum right, contents wrong: "Bad data format", as Redis says.
    body = payload[:-10]
    broken = rdb.payload_for(body[0], body[1:-3], 10)
    assert raw_s.call("RESTORE", "k", "0", broken) == Err("ERR Bad data format")
    # A type StreamDB does not hold: a clear error naming it.
    rc.hset("mig:hash", "f", "v")
    reply = raw_s.call("RESTORE", "k", "0", rc.dump("mig:hash"))
    assert isinstance(reply, Err) and reply.startswith("ERR Bad data format: a Redis hash")
    assert sc.ping() and sc.exists("k") == 0


def run_admin(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "streamdb.cli.admin", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.differential
def test_import_rdb_of_a_redis_dump_file(both, redis_server):
    """SAVE on redis-server -> streamdb-admin import-rdb dump.rdb: the same data."""
    rc, sc, raw_r, raw_s, srv = both
    keys = make_redis_streams(rc)
    rc.set("mig:text", "compressible text " * 10)
    rc.set("mig:ttl", "expires", px=600_000)
    rc.hset("mig:hash", "f", "v")                      # a type StreamDB does not hold
    r1 = redis.Redis(port=redis_server.port, db=1)
    r1.xadd("mig:db1", {"x": "1"}, id="9-9")
    r1.close()
    assert rc.config_get("rdbcompression") == {"rdbcompression": "yes"}
    rc.save()
    dump = Path(redis_server.data_dir) / "dump.rdb"
    assert dump.read_bytes().startswith(b"REDIS0010")

    done = run_admin("import-rdb", str(dump), "-p", str(srv.port))
    assert done.returncode == 1, done.stderr            # 1: the hash was skipped
    assert "Traceback" not in done.stdout + done.stderr
    assert "skipped key mig:hash: a Redis hash (RDB type" in done.stdout, done.stdout
    assert "imported 6 keys" in done.stdout and "1 skipped" in done.stdout, done.stdout
    for key in keys:
        assert reads(raw_s, key) == reads(raw_r, key), key
    assert sc.get("mig:text") == rc.get("mig:text")
    assert 0 < sc.pttl("mig:ttl") <= 600_000
    assert sc.exists("mig:hash") == 0
    assert redis.Redis(port=srv.port, db=1).xrange("mig:db1") == [(b"9-9", {b"x": b"1"})]

    # Again: every key exists now (BUSYKEY, named), unless --replace.
    again = run_admin("import-rdb", str(dump), "-p", str(srv.port))
    assert again.returncode == 1 and "BUSYKEY" in again.stdout and "6 failed" in again.stdout
    replaced = run_admin("import-rdb", str(dump), "-p", str(srv.port), "--replace", "--db", "3")
    assert "imported 6 keys" in replaced.stdout, replaced.stdout
    assert redis.Redis(port=srv.port, db=3).xlen("mig:db1") == 1


def test_import_rdb_of_a_missing_or_foreign_file_exits_2(tmp_path):
    not_rdb = tmp_path / "notes.txt"
    not_rdb.write_text("hello\n")
    for path, says in ((tmp_path / "absent.rdb", "No such file or directory"),
                       (not_rdb, "not a Redis RDB file")):
        done = run_admin("import-rdb", str(path), "-p", "1")
        assert done.returncode == 2, done
        assert says in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_import_rdb_of_a_damaged_file_sends_nothing(tmp_path, fresh_server):
    """A file cut short, or with a wrong checksum: exit 2, and not even the keys before
    the damage are sent."""
    from streamdb.persistence.rdb import crc64
    body = b"REDIS0010" + b"\xfe\x00" + b"\x00" + b"\x01a" + b"\x01x" + b"\x00" + b"\x01b" + b"\x01y"
    whole = body + b"\xff" + crc64(body + b"\xff").to_bytes(8, "little")
    cases = {"cut.rdb": (body[:-1], "value ends early"),
             "flipped.rdb": (whole[:-9] + b"\xff" + bytes([whole[-8] ^ 1]) + whole[-7:],
                             "checksum is wrong"),
             "module.rdb": (b"REDIS0010\x00\x01a\x01x\x07\x01m" + bytes(12),
                            "cannot read past key m, a Redis module value (RDB type 7)")}
    for name, (content, says) in cases.items():
        (tmp_path / name).write_bytes(content)
        done = run_admin("import-rdb", str(tmp_path / name), "-p", str(fresh_server.port))
        assert done.returncode == 2, done
        assert says in done.stderr and "nothing was imported" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert redis.Redis(port=fresh_server.port).dbsize() == 0
    (tmp_path / "whole.rdb").write_bytes(whole)
    done = run_admin("import-rdb", str(tmp_path / "whole.rdb"), "-p", str(fresh_server.port))
    assert done.returncode == 0 and "imported 2 keys" in done.stdout, done
    assert redis.Redis(port=fresh_server.port).mget("a", "b") == [b"x", b"y"]


# -- MIGRATE ------------------------------------------------------------------------------

@pytest.mark.differential
def test_migrate_from_redis_to_streamdb(both):
    """redis-server's MIGRATE sends its own payloads to StreamDB as RESTOREs."""
    rc, sc, raw_r, raw_s, srv = both
    keys = make_redis_streams(rc)
    rc.set("mig:text", "some text " * 10, px=900_000)
    before = {key: reads(raw_r, key) for key in keys}
    assert rc.migrate("127.0.0.1", srv.port, keys + ["mig:text"], 0, 5000) == b"OK"
    assert rc.exists(*keys, "mig:text") == 0                     # moved, not copied
    for key in keys:
        assert reads(raw_s, key) == before[key], key
    assert sc.get("mig:text") == b"some text " * 10 and 0 < sc.pttl("mig:text") <= 900_000


@pytest.mark.differential
def test_migrate_from_streamdb_to_redis(both, redis_server):
    """StreamDB's MIGRATE (dump-payload-format redis) moves streams into redis-server;
    its replies and errors are Redis's."""
    rc, sc, raw_r, raw_s, srv = both
    keys = make_redis_streams(rc)
    for key in keys:
        sc.restore(key, 0, rc.dump(key))
    rc.flushall()
    expected = {key: reads(raw_s, key) for key in keys}
    sc.config_set("dump-payload-format", "redis")
    port = str(redis_server.port)

    assert raw_s.call("MIGRATE", "127.0.0.1", port, "mig:orders", "0", "5000", "COPY") == Status("OK")
    assert sc.exists("mig:orders") == 1                          # COPY keeps it
    assert raw_s.call("MIGRATE", "127.0.0.1", port, "", "0", "5000", "KEYS", *keys) == \
        Err("ERR Target instance replied with error: BUSYKEY Target key name already exists.")
    assert sc.exists("mig:orders") == 1 and sc.exists("mig:small", "mig:empty") == 0
    assert raw_s.call("MIGRATE", "127.0.0.1", port, "mig:orders", "0", "5000", "REPLACE") == Status("OK")
    assert sc.exists("mig:orders") == 0
    for key in keys:
        assert reads(raw_r, key) == expected[key], key
    assert raw_s.call("MIGRATE", "127.0.0.1", port, "mig:orders", "0", "5000") == \
        raw_r.call("MIGRATE", "127.0.0.1", port, "nosuchkey", "0", "5000")          # NOKEY

    # Errors: the same replies redis-server gives for the same MIGRATE.
    sc.set("mig:k", "v")
    rc.set("mig:k", "v")
    dead = str(_closed_port())
    for args in (["127.0.0.1", dead, "mig:k", "0", "1000"],
                 ["127.0.0.1", port, "mig:k", "0", "1000", "AUTH", "wrong"],
                 ["127.0.0.1", port, "mig:k", "0", "1000", "KEYS", "x"],
                 ["127.0.0.1", port, "mig:k", "x", "1000"],
                 ["127.0.0.1", port, "mig:k", "0", "1000", "NOSUCHOPTION"]):
        ours = raw_s.call("MIGRATE", *args)
        theirs = raw_r.call("MIGRATE", *([args[0], str(srv.port)] + args[2:])
                            if args[1] == port else args)
        assert ours == theirs, args
        assert isinstance(ours, Err), ours
    assert sc.get("mig:k") == b"v"


def _closed_port() -> int:
    from streamdb.cli.procs import free_port
    return free_port()


@pytest.mark.differential
def test_restore_asking_is_restore_without_a_cluster(both):
    """What a Redis Cluster node's MIGRATE sends: StreamDB takes it as RESTORE."""
    rc, sc, raw_r, raw_s, _ = both
    make_redis_streams(rc)
    payload = rc.dump("mig:orders")
    assert raw_s.call("RESTORE-ASKING", "mig:orders", "0", payload) == Status("OK")
    assert reads(raw_s, "mig:orders") == reads(raw_r, "mig:orders")
    assert raw_s.call("RESTORE-ASKING", "mig:orders", "0", payload) == \
        raw_r.call("RESTORE-ASKING", "mig:orders", "0", payload) == \
        Err("BUSYKEY Target key name already exists.")


@pytest.mark.differential
def test_a_restored_redis_stream_survives_kill9_and_a_rewrite(redis_server, tmp_path):
    """The AOF logs the RESTORE with Redis's payload; a restart replays it, and an AOF
    rewrite (StreamDB's own form) keeps the same stream."""
    rc = redis.Redis(port=redis_server.port)
    rc.flushall()
    try:
        keys = make_redis_streams(rc)
        raw_r = RawClient(redis_server.port)
        expected = {key: reads(raw_r, key) for key in keys}
        with ServerProcess(tmp_path / "sdb", "--appendonly", "yes", "--appendfsync", "always",
                           "--save", "") as srv:
            sc = redis.Redis(port=srv.port)
            for key in keys:
                sc.restore(key, 0, rc.dump(key))
            srv.kill9()
            srv.start()
            assert {key: reads(RawClient(srv.port), key) for key in keys} == expected
            sc.bgrewriteaof()
            wait_until(lambda: sc.info("persistence")["aof_rewrite_in_progress"] == 0)
            srv.kill9()
            srv.start()
            assert {key: reads(RawClient(srv.port), key) for key in keys} == expected
    finally:
        rc.config_set("stream-node-max-entries", 100)
        rc.flushall()


DOC_BLOCKS = {"docs/OPERATIONS.md": {"import-rdb"}}


@pytest.mark.differential
def test_the_guides_import_rdb_block(both, redis_server, tmp_path):
    """docs/OPERATIONS.md's import-rdb block, on a dump.rdb that redis-server wrote."""
    from docblocks import run_block
    rc, sc, raw_r, raw_s, srv = both
    keys = make_redis_streams(rc)
    rc.save()
    out = run_block("docs/OPERATIONS.md", "import-rdb", cwd=tmp_path, PORT=srv.port,
                    REDIS_RDB=Path(redis_server.data_dir) / "dump.rdb")
    assert f"imported {len(keys)} keys" in out and "0 failed, 0 skipped" in out, out
    for key in keys:
        assert reads(raw_s, key) == reads(raw_r, key), key


# -- the stream forms of other Redis versions ------------------------------------------------

def _reframe_stream(payload: bytes, to_type: int, active_time: int = 0) -> bytes:
    """Redis 7.0's type-19 DUMP of a stream rewritten as type 15 (Redis 5-6: without the
    first id, max-deleted id, entries-added and each group's entries-read) or type 21
    (Redis 7.2 to 8.4: each consumer with ``active_time`` after its seen time), by copying its
    bytes around those fields."""
    body = payload[1:-10]
    r = rdb.Reader(body)
    out = bytearray()
    mark = 0

    def keep_to_here() -> None:
        nonlocal mark
        out.extend(body[mark:r.pos])
        mark = r.pos

    def drop_to_here() -> None:
        nonlocal mark
        mark = r.pos

    for _ in range(r.length()):
        r.string()
        r.string()
    r.length(), r.length(), r.length()                      # length, last id
    keep_to_here()
    for _ in range(5):                                       # first id, max-deleted id, entries-added
        r.length()
    if to_type == 15:
        drop_to_here()
    for _ in range(r.length()):
        r.string()
        r.length(), r.length()
        keep_to_here()
        r.length()                                           # entries-read
        if to_type == 15:
            drop_to_here()
        for _ in range(r.length()):
            r.take(16), r.millis(), r.length()
        for _ in range(r.length()):
            r.string()
            r.millis()
            keep_to_here()
            if to_type == 21:
                out.extend(active_time.to_bytes(8, "little"))
            for _ in range(r.length()):
                r.take(16)
    keep_to_here()
    assert r.at_end()
    return rdb.payload_for(to_type, bytes(out), 9 if to_type == 15 else 12)


@pytest.mark.differential
def test_redis_5_stream_form_loads_as_redis_loads_it(both):
    """Type 15 has no counters: entries-added becomes the length, max-deleted 0-0, and a
    group's entries-read is estimated, the same on both servers."""
    rc, sc, raw_r, raw_s, _ = both
    keys = make_redis_streams(rc)
    for key in keys:
        old_form = _reframe_stream(rc.dump(key), 15)
        assert raw_r.call("RESTORE", key + ":v5", "0", old_form) == Status("OK")
        assert raw_s.call("RESTORE", key + ":v5", "0", old_form) == Status("OK")
        ours, theirs = reads(raw_s, key + ":v5"), reads(raw_r, key + ":v5")
        if key == "mig:empty":
            # Redis 7.0 records the first id of an empty type-15 stream as the largest
            # id (its edge search finds none); StreamDB has no entry to record: 0-0.
            pos = theirs[2].index(b"recorded-first-entry-id") + 1
            assert theirs[2][pos] == b"18446744073709551615-18446744073709551615"
            assert ours[2][pos] == b"0-0"
            theirs[2][pos] = ours[2][pos]
        assert ours == theirs, key
    info = sc.xinfo_stream("mig:orders:v5")
    assert info["entries-added"] == info["length"] and info["max-deleted-entry-id"] == b"0-0"


@pytest.mark.differential
def test_redis_7_2_stream_form_keeps_active_times(both):
    rc, sc, raw_r, raw_s, _ = both
    make_redis_streams(rc)
    new_form = _reframe_stream(rc.dump("mig:orders"), 21, active_time=1_700_000_000_123)
    assert sc.restore("mig:orders", 0, new_form)
    full = sc.xinfo_stream("mig:orders", full=True)
    consumers = [c for g in full["groups"] for c in g["consumers"]]
    assert consumers and all(c[b"active-time"] == 1_700_000_000_123 for c in consumers), consumers
    assert reads(raw_s, "mig:orders") == reads(raw_r, "mig:orders")


def test_dump_in_redis_form_refuses_nacked_entries(fresh_server):
    """Redis has no unowned pending entry: DUMP says so rather than drop or invent one."""
    sc = redis.Redis(port=fresh_server.port)
    sc.xadd("s", {"f": "v"}, id="1-1")
    sc.xgroup_create("s", "g", "0")
    sc.xreadgroup("g", "c", {"s": ">"})
    sc.execute_command("XNACK", "s", "g", "SILENT", "IDS", 1, "1-1")
    sc.config_set("dump-payload-format", "redis")
    with pytest.raises(redis.ResponseError, match="cannot DUMP in Redis's form: the stream has "
                                                  "NACKed pending entries"):
        sc.dump("s")
    sc.config_set("dump-payload-format", "streamdb")
    assert sc.dump("s").startswith(b"SDB2")


@pytest.mark.differential
def test_a_replica_gets_a_stream_restored_from_redis(redis_server, tmp_path):
    """The primary propagates the RESTORE with Redis's payload; the replica decodes it too."""
    rc = redis.Redis(port=redis_server.port)
    rc.flushall()
    try:
        keys = make_redis_streams(rc)
        with ServerProcess(tmp_path / "p", "--save", "") as primary, \
                ServerProcess(tmp_path / "r", "--save", "", "--replicaof", "127.0.0.1",
                              str(primary.port)) as replica:
            sp, sr = redis.Redis(port=primary.port), redis.Redis(port=replica.port)
            wait_until(lambda: sr.info("replication")["master_link_status"] == "up")
            for key in keys:
                sp.restore(key, 0, rc.dump(key))
            wait_until(lambda: sr.info("replication")["slave_repl_offset"] >=
                       sp.info("replication")["master_repl_offset"])
            assert sr.execute_command("DEBUG", "DIGEST") == sp.execute_command("DEBUG", "DIGEST")
            for key in keys:
                assert reads(RawClient(replica.port), key) == reads(RawClient(primary.port), key)
    finally:
        rc.config_set("stream-node-max-entries", 100)
        rc.flushall()


@pytest.mark.differential
def test_dump_in_redis_form_uses_every_listpack_encoding_as_redis_reads_it(both):
    """Values at each listpack encoding's bounds (integers of 7, 13, 16, 24, 32 and 64
    bits, strings of 6, 12 and 32-bit lengths, numbers that must stay strings), and ids
    whose sequence falls below the node's first: redis-server reads back each one."""
    rc, sc, raw_r, raw_s, _ = both
    numbers = [0, 127, 128, -1, -4096, 4095, 4096, -4097, 32767, -32768, 32768, 2**23 - 1,
               -2**23, 2**23, 2**31 - 1, -2**31, 2**31, 2**63 - 1, -2**63]
    texts = [b"", b"x" * 63, b"y" * 64, b"z" * 4095, b"w" * 4096, b"-0", b"007", b"+5",
             b"9223372036854775808", b"-9223372036854775809", b"1 ", b"\x00\xff"]
    values = [str(n).encode() for n in numbers] + texts
    for i, value in enumerate(values):
        sc.xadd("enc", {"v": value, "i": i}, id=f"{1000 + i}-{(7 - i) % 5}")
        sc.xadd("enc", {b"field-" + value[:10]: value}, id=f"{1000 + i}-{9 + (7 - i) % 5}")
    sc.config_set("dump-payload-format", "redis")
    rc.restore("enc", 0, sc.dump("enc"))
    assert raw_r.call("XRANGE", "enc", "-", "+") == raw_s.call("XRANGE", "enc", "-", "+")
    assert len(raw_r.call("XRANGE", "enc", "-", "+")) == 2 * len(values)


def test_newer_stream_forms_are_named_not_misread(fresh_server):
    """Redis 8.6+'s stream forms (types 26, 27) get an error that names them."""
    sc = RawClient(fresh_server.port)
    for rdb_type, says in ((26, "stream in Redis 8.6's form"), (27, "stream in Redis 8.8's form")):
        payload = rdb.payload_for(rdb_type, b"\x00" * 12, 14)
        reply = sc.call("RESTORE", "k", "0", payload)
        assert reply == Err(f"ERR Bad data format: a Redis {says} (RDB type {rdb_type}): StreamDB "
                            f"reads Redis's stream forms up to 8.4's (RDB types 15, 19, 21)"), reply
