"""Snapshots in LMDB: incremental writes, point-in-time with the AOF, recovery, corruption."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import redis

import streamdb.commands  # noqa: F401
from streamdb.commands.server import digest_keyspace
from streamdb.persistence.aof import Aof
from streamdb.persistence.nodestore import LmdbNodeStore
from streamdb.persistence.snapshot import SnapshotError, Snapshotter, load_snapshot, write_snapshot
from streamdb.server.core import Core

from helpers import ServerProcess


def _cmd(core, client, *args):
    return core.execute(client, [a if isinstance(a, bytes) else str(a).encode() for a in args])


def _populate(core, n: int, groups: bool = True) -> None:
    c = core.new_client()
    for i in range(n):
        _cmd(core, c, "XADD", f"s{i % 3}", f"{i + 1}-0", "sensor-id", "1234", "temperature", "19.8")
    if groups:
        _cmd(core, c, "XGROUP", "CREATE", "s0", "g", "0")
        _cmd(core, c, "XREADGROUP", "GROUP", "g", "alice", "COUNT", "25", "STREAMS", "s0", ">")
        _cmd(core, c, "XACK", "s0", "g", "1-0")
        _cmd(core, c, "XDEL", "s0", "4-0")
    _cmd(core, c, "SET", "checkpoint", "42")
    _cmd(core, c, "PEXPIRE", "checkpoint", "100000000")
    _cmd(core, c, "SELECT", "3")
    _cmd(core, c, "XADD", "other-db", "1-1", "a", "b")


def _loaded(path) -> Core:
    core = Core()
    load_snapshot(str(path), core.keyspace)
    return core


def test_a_snapshot_round_trips_the_complete_state(tmp_path):
    core = Core()
    _populate(core, 1000)
    write_snapshot(str(tmp_path / "snap"), core.keyspace, None, None, 0)
    assert digest_keyspace(_loaded(tmp_path / "snap")) == digest_keyspace(core)


def test_incremental_snapshot_writes_only_what_changed(tmp_path):
    core = Core()
    core.config.values["stream-node-max-entries"] = 100
    snap = Snapshotter(core, str(tmp_path / "snap"))
    core.add_effect_sink(snap, wants_commands=False)
    c = core.new_client()
    n = 100_000
    for i in range(n):
        _cmd(core, c, "XADD", "big", f"{i + 1}-0", "sensor-id", "1234", "temperature", "19.8")
    full = snap.save()["bytes_written"]
    for i in range(n, n + n // 100):                # 1% more entries
        _cmd(core, c, "XADD", "big", f"{i + 1}-0", "sensor-id", "1234", "temperature", "19.8")
    incr = snap.save()["bytes_written"]
    # The stream's document (its node headers, 45 bytes a node) is written again each
    # time: about 5% of a full write, with ~740-byte node blobs.  A full rewrite would
    # write 100% again.
    assert incr <= 0.1 * full, (incr, full)
    assert digest_keyspace(_loaded(tmp_path / "snap")) == digest_keyspace(core)
    untouched = snap.save()["bytes_written"]          # nothing changed: nothing written
    assert untouched == 0


def test_xadds_of_several_clients_reach_an_incremental_snapshot(tmp_path):
    """XADDs of several clients, interleaved: the next incremental snapshot must
    hold every entry, plain, capped and IDMP alike."""
    core = Core()
    snap = Snapshotter(core, str(tmp_path / "snap"))
    core.add_effect_sink(snap, wants_commands=False)
    _populate(core, 300)
    snap.save()
    clients = [core.new_client(), core.new_client()]
    for key, form in (("plain", []), ("capped", ["MAXLEN", "~", "50"]),
                      ("exactly-once", ["IDMP", "p", None])):
        for i in range(40):
            for c in clients:
                opts = [f"{i}-{c.id}" if o is None else o for o in form]
                reply = core.execute(c, [x.encode() for x in ("XADD", key, *opts, "*", "n", str(i))])
                assert type(reply) is bytes, reply
    written = snap.save()["bytes_written"]
    assert written > 0
    assert digest_keyspace(_loaded(tmp_path / "snap")) == digest_keyspace(core)


def test_deleted_and_trimmed_keys_leave_the_snapshot(tmp_path):
    core = Core()
    snap = Snapshotter(core, str(tmp_path / "snap"))
    core.add_effect_sink(snap, wants_commands=False)
    _populate(core, 600)
    snap.save()
    c = core.new_client()
    _cmd(core, c, "DEL", "s1")
    _cmd(core, c, "XTRIM", "s2", "MAXLEN", "10")
    _cmd(core, c, "SELECT", "3")
    _cmd(core, c, "FLUSHDB")
    snap.save()
    assert digest_keyspace(_loaded(tmp_path / "snap")) == digest_keyspace(core)


def test_bgsave_is_point_in_time_and_retires_covered_segments(tmp_path):
    core = Core()
    aof = Aof(core, str(tmp_path / "aof"), fsync="always")
    aof.open_for_append()
    core.add_effect_sink(aof.append_batch)
    snap = Snapshotter(core, str(tmp_path / "snap"), aof)
    core.add_effect_sink(snap, wants_commands=False)
    _populate(core, 300)
    aof.flush()
    before = digest_keyspace(core)
    snap.bgsave()
    c = core.new_client()
    _cmd(core, c, "XADD", "s0", "99999-0", "written", "during-the-save")   # not in the snapshot
    aof.flush()
    snap.wait()
    assert snap.last_ok
    assert digest_keyspace(_loaded(tmp_path / "snap")) == before
    assert aof.manifest.segments() == [aof.manifest.incrs[-1]]              # old segments retired
    recovered = Core()
    info = load_snapshot(str(tmp_path / "snap"), recovered.keyspace)
    Aof(recovered, str(tmp_path / "aof")).load(covered_seq=info["aof_seq"])
    assert digest_keyspace(recovered) == digest_keyspace(core)


def test_crash_between_snapshot_commit_and_manifest_swap(tmp_path):
    core = Core()
    aof = Aof(core, str(tmp_path / "aof"), fsync="always")
    aof.open_for_append()
    core.add_effect_sink(aof.append_batch)
    _populate(core, 200)
    covered = aof.rotate()
    write_snapshot(str(tmp_path / "snap"), core.keyspace, None, covered, 0)
    # ... crash here: the snapshot committed, the covered segments were never retired
    c = core.new_client()
    _cmd(core, c, "XADD", "s0", "88888-0", "after", "snapshot")
    aof.close()
    assert len(aof.manifest.segments()) == 2
    recovered = Core()
    info = load_snapshot(str(tmp_path / "snap"), recovered.keyspace)
    Aof(recovered, str(tmp_path / "aof")).load(covered_seq=info["aof_seq"])
    assert digest_keyspace(recovered) == digest_keyspace(core)


def test_a_bad_checksum_is_a_clear_error_and_loads_nothing(tmp_path):
    core = Core()
    _populate(core, 500)
    path = tmp_path / "snap"
    write_snapshot(str(path), core.keyspace, None, None, 0)
    data = bytearray((path / "data.mdb").read_bytes())
    needle = b"temperature"
    where = data.find(needle)
    assert where > 0
    data[where] ^= 0x20
    (path / "data.mdb").write_bytes(bytes(data))
    fresh = Core()
    with pytest.raises(SnapshotError, match="checksum mismatch"):
        load_snapshot(str(path), fresh.keyspace)
    assert digest_keyspace(fresh) == "0" * 40


def test_a_first_snapshot_killed_while_writing_is_no_snapshot_but_a_lost_format_is_an_error(tmp_path):
    """write_snapshot's open_db calls commit its empty databases before its one write
    transaction: a first snapshot killed in between leaves them and nothing else.  A
    restart then finds no snapshot (the AOF holds everything), instead of refusing to
    start; a snapshot with rows but no format record is still an error."""
    import lmdb
    path = tmp_path / "snap"
    for name in (b"meta", b"keys", b"nodes"):      # killed after each of them
        env = lmdb.open(str(path), map_size=1 << 30, max_dbs=4)
        env.open_db(name)
        env.close()
        fresh = Core()
        assert load_snapshot(str(path), fresh.keyspace) is None
        assert digest_keyspace(fresh) == "0" * 40
        store = LmdbNodeStore(str(path), 1 << 30)
        store.pin()                                 # (what a start does after loading)
        store.close()
    env = lmdb.open(str(path), map_size=1 << 30, max_dbs=4)
    with env.begin(write=True) as txn:
        txn.put(b"\0\0\0\0k", b"x", db=env.open_db(b"keys", txn=txn))
    env.close()
    with pytest.raises(SnapshotError, match="unsupported snapshot format None"):
        load_snapshot(str(path), Core().keyspace)


def test_server_restart_from_snapshot_plus_aof_tail_after_kill9(tmp_path):
    d = tmp_path / "data"
    srv = ServerProcess(d, "--appendonly", "yes", "--appendfsync", "always", "--save", "").start()
    r = redis.Redis(port=srv.port)
    for i in range(300):
        r.xadd("s", {"i": i})
    r.xgroup_create("s", "g", id="0")
    r.xreadgroup("g", "c1", {"s": ">"}, count=7)
    assert r.bgsave()
    deadline = __import__("time").time() + 10
    while r.info("persistence")["rdb_bgsave_in_progress"] and __import__("time").time() < deadline:
        pass
    for i in range(50):
        r.xadd("s", {"after": i})
    r.xreadgroup("g", "c2", {"s": ">"}, count=3)
    digest = r.execute_command("DEBUG", "DIGEST")
    srv.kill9()
    srv.stop()
    srv = ServerProcess(d, "--appendonly", "yes", "--save", "").start()
    try:
        r = redis.Redis(port=srv.port)
        assert r.execute_command("DEBUG", "DIGEST") == digest
        assert r.execute_command("DEBUG", "RELOAD") == b"OK"
        assert r.execute_command("DEBUG", "DIGEST") == digest
        assert "Snapshot loaded" in srv.log_text()
    finally:
        srv.stop()


def test_shutdown_save_and_snapshot_only_mode(tmp_path):
    d = tmp_path / "data"
    srv = ServerProcess(d, "--appendonly", "no", "--save", "").start()
    r = redis.Redis(port=srv.port)
    r.xadd("s", {"a": 1}, id="1-1")
    digest = r.execute_command("DEBUG", "DIGEST")
    try:
        r.execute_command("SHUTDOWN", "SAVE")
    except redis.ConnectionError:
        pass
    srv.proc.wait(10)
    srv.stop()
    srv = ServerProcess(d, "--appendonly", "no", "--save", "").start()
    try:
        assert redis.Redis(port=srv.port).execute_command("DEBUG", "DIGEST") == digest
    finally:
        srv.stop()


def test_a_corrupt_snapshot_stops_the_server_with_a_clear_error(tmp_path):
    d = tmp_path / "data"
    core = Core()
    _populate(core, 300)
    write_snapshot(str(d / "snapshot.lmdb"), core.keyspace, None, None, 0)
    mdb = d / "snapshot.lmdb" / "data.mdb"
    data = bytearray(mdb.read_bytes())
    data[data.find(b"sensor-id")] ^= 0x01
    mdb.write_bytes(bytes(data))
    bad = ServerProcess(d, "--appendonly", "no", "--save", "")
    with pytest.raises(RuntimeError, match="exited"):
        bad.start()
    bad.stop()
    assert "Fatal error loading the snapshot" in bad.log_text()
    assert mdb.read_bytes() == bytes(data)


def test_rows_of_a_renamed_cold_stream_are_copied_and_deleted_one_snapshot_later(tmp_path):
    """A RENAMEd stream's cold nodes are copied to the new key's rows; the old rows
    stay until the next snapshot (a child forked before the parent points the nodes
    at their new rows may still read them there), then go."""
    from streamdb.engine.nodecache import CACHE
    core = Core()
    snap = Snapshotter(core, str(tmp_path / "snap"))
    core.add_effect_sink(snap, wants_commands=False)
    core.config.values["stream-cache-size"] = 1
    snap.configure_cache()
    try:
        c = core.new_client()
        for i in range(1000):
            _cmd(core, c, "XADD", "a", f"{i + 1}-0", "f", "v")
        snap.save()
        sealed = [n for n in core.keyspace[0].data[b"a"].nodes if n.ids is None]
        assert sealed and all(n.blob is None for n in sealed)     # durable, then evicted
        digest = digest_keyspace(core)
        _cmd(core, c, "RENAME", "a", "b")
        stats = snap.save()
        assert len(stats["deferred"]) == len(sealed) and stats["nodes_deleted"] == 0
        assert all(n.where.endswith(b"b") for n in sealed)
        assert digest_keyspace(core) != digest           # (the key's name is in the digest)
        snap.store.close()
        assert digest_keyspace(_loaded(tmp_path / "snap")) == digest_keyspace(core)
        stats = snap.save()
        assert stats["nodes_deleted"] == len(sealed) and not stats["deferred"]
        snap.store.close()
        assert digest_keyspace(_loaded(tmp_path / "snap")) == digest_keyspace(core)
    finally:
        snap.store.close()
        CACHE.reset()


def _node_rows(path, key: bytes) -> list[int]:
    """The first ids of the node rows key ``key`` (db 0) has in the snapshot at ``path``."""
    import lmdb
    from streamdb.persistence.snapshot import _node_prefix
    prefix = _node_prefix(0, key)
    env = lmdb.open(str(path), max_dbs=4, readonly=True, lock=False)
    try:
        nodes = env.open_db(b"nodes", create=False)
        with env.begin() as txn:
            cur = txn.cursor(db=nodes)
            rows = []
            if cur.set_range(prefix):
                for k in cur.iternext(values=False):
                    if not k.startswith(prefix):
                        break
                    rows.append(int.from_bytes(k[len(prefix):], "big"))
            return rows
    finally:
        env.close()


def test_an_appended_cold_stream_is_snapshotted_without_reading_its_rows(tmp_path):
    """With the node cache, the nodes located in a key's own rows are counted against
    the rows the key has: appending needs no read of them; a trim, or the key made
    again, reads them and deletes what the stream lost.  The rows are always exactly
    the stream's sealed nodes, and the snapshot loads to the same state."""
    from streamdb.engine.nodecache import CACHE
    core = Core()
    path = tmp_path / "snap"
    snap = Snapshotter(core, str(path))
    core.add_effect_sink(snap, wants_commands=False)
    core.config.values["stream-cache-size"] = 1
    snap.configure_cache()

    def sealed_firsts():
        return [n.first for n in core.keyspace[0].data[b"a"].nodes if n.ids is None]

    def check(stats, rows_read):
        assert stats["rows_read"] == rows_read, stats
        snap.store.close()
        assert _node_rows(path, b"a") == sealed_firsts()
        assert digest_keyspace(_loaded(path)) == digest_keyspace(core)

    try:
        c = core.new_client()
        for i in range(1000):
            _cmd(core, c, "XADD", "a", f"{i + 1}-0", "f", "v")
        check(snap.save(), 0)                     # a new key: no rows to read
        first_rows = len(sealed_firsts())
        for i in range(1000, 1500):
            _cmd(core, c, "XADD", "a", f"{i + 1}-0", "f", "v")
        stats = snap.save()
        assert stats["nodes_written"] == len(sealed_firsts()) - first_rows
        check(stats, 0)                           # appended: the count says no row went
        _cmd(core, c, "XTRIM", "a", "MAXLEN", "300")
        snap.store.close()
        before = len(_node_rows(path, b"a"))
        stats = snap.save()
        assert stats["nodes_deleted"] == before - len(sealed_firsts()) > 0
        check(stats, before)                      # trimmed: the rows are read
        _cmd(core, c, "DEL", "a")
        for i in range(800):
            _cmd(core, c, "XADD", "a", f"{i + 1}-0", "f", "v")
        snap.store.close()
        before = len(_node_rows(path, b"a"))
        check(snap.save(), before)                # made again: read, old rows replaced
    finally:
        snap.store.close()
        CACHE.reset()


# DUMP of a stream by the version before sealed nodes had format 2 (its nodes are
# msgpack documents): a sealed node of 4 entries, 1-1 deleted, and an open node of 2.
FORMAT_1_PAYLOAD = bytes.fromhex(
    "534442318aa174a673747265616da66c656e67746805a76c6173745f6964c4100000018bcfe5692c"
    "0000000000000003ad656e74726965735f616464656406ae6d61785f64656c657465645f6964c410"
    "0000018bcfe568000000000000000001a667726f75707390a469646d70c0a26e68c45a0000018bcf"
    "e5680000000000000000000000018bcfe56805000000000000000900000004000000030000012400"
    "0000018bcfe5692c00000000000000020000018bcfe5692c00000000000000030000000200000002"
    "0000004301a26e6292c5011e94cf0000018bcfe5680092c40973656e736f722d6964c40b74656d70"
    "657261747572659800000001050005099492c40431323334c40431392e3892c4022d37c40432302e"
    "3193c0c4056f74686572c4c8"
) + b"x" * 200 + bytes.fromhex(
    "92c40130c400c44394cf0000018bcfe5692c92c40973656e736f722d6964c40b74656d7065726174"
    "75726594000200039292c403303037c40431392e3895c0c40161c40131c40162c40132a26e648100"
    "91c4100000018bcfe56800000000000000000162002d40"
)
FORMAT_1_ENTRIES = [
    (b"1700000000000-0", {b"sensor-id": b"1234", b"temperature": b"19.8"}),
    (b"1700000000005-0", {b"other": b"x" * 200}),
    (b"1700000000005-9", {b"sensor-id": b"0", b"temperature": b""}),
    (b"1700000000300-2", {b"sensor-id": b"007", b"temperature": b"19.8"}),
    (b"1700000000300-3", {b"a": b"1", b"b": b"2"}),
]


def test_format_1_stream_nodes_restore_snapshot_and_load(tmp_path):
    """A payload whose nodes an earlier version sealed RESTOREs (its nodes checked),
    reads, takes XADD and XDEL, and survives a snapshot and a restart."""
    d = tmp_path / "data"
    srv = ServerProcess(d, "--appendonly", "no", "--save", "").start()
    try:
        r = redis.Redis(port=srv.port)
        r.restore("old", 0, FORMAT_1_PAYLOAD)
        assert r.xrange("old") == FORMAT_1_ENTRIES
        assert r.xrevrange("old", count=2) == FORMAT_1_ENTRIES[:-3:-1]
        r.xadd("old", {"sensor-id": "5"}, id="1700000000400-0")
        assert r.xdel("old", "1700000000005-9") == 1
        want = r.xrange("old")
        assert want == FORMAT_1_ENTRIES[:2] + FORMAT_1_ENTRIES[3:] + \
            [(b"1700000000400-0", {b"sensor-id": b"5"})]
        assert r.save()
        srv.kill9()
        srv = ServerProcess(d, "--appendonly", "no", "--save", "").start()
        r = redis.Redis(port=srv.port)
        assert r.xrange("old") == want
        assert r.xlen("old") == 5
    finally:
        srv.stop()
